# Shared by the checkpoint fault tests (async_save_fault_cli.sh, async_save_kill_cli.sh); source it.

# complete DIR: the tracker names a directory with an index, and every file the index lists is there
# with its recorded size.
complete() {
  python3 - "$1" <<'EOF'
import json, os, sys
root = sys.argv[1]
it = int(open(os.path.join(root, "latest_checkpointed_iteration.txt")).read())
d = os.path.join(root, "iter_%07d" % it)
index = json.load(open(os.path.join(d, "index.json")))
assert index["iteration"] == it, (index["iteration"], it)
for name, f in index["files"].items():
    assert os.path.getsize(os.path.join(d, name)) == f["bytes"], name
print(it)
EOF
}
