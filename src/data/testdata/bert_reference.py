#!/usr/bin/python3
"""Reference values for the BERT dataset tests, computed independently of the C++ code.

Megatron-LM's BERT dataset is transcribed here as Megatron writes it: helpers.cpp's build_mapping
as Python loops over a pure-Python std::mt19937 and std::mt19937_64 (checked below against the C++
standard's required outputs and against NumPy's MT19937), and
megatron/core/datasets/{bert_dataset,masked_dataset}.py's __getitem__ and
_create_masked_lm_predictions with NumPy's own RandomState, with pretrain_bert.py's options
(masking_max_ngram=3, masking_do_full_word=True, no permutation, no longer n-grams, no geometric
distribution). The indexed dataset, --split and blending come from megatron_reference.py.

Usage (writes little-endian int64 arrays, *.i64, and summary.json into --out):
  mt    --seed S --count K       the first K outputs of std::mt19937(S) and std::mt19937_64(S)
  draws --seed S --count K       RandomState(S): K rounds of random() (its float64 bits) and
                                 randint(0, n), randint(1, n) for n = 2, 3, 100, 70000, 2^33
  bert  --data-path ... --split S --seq-length L --seed X --sizes a,b,c --mask-prob P
        --short-seq-prob Q --binary-head 0|1 --vocab FILE --cls C --sep S --mask M --pad D
        train/valid/test datasets as BlendedMegatronDatasetBuilder builds BERTMaskedWordPieceDataset;
        per split the mapping (<split>-mapping.i64, rows of 3) and every sample (<split>-samples.i64:
        text, types, labels, loss_mask, padding_mask, then is_random and truncated)
"""

import argparse
import json
import math
import os
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_reference import (BlendedDataset, IndexedDataset, _get_size_per_split_per_dataset,  # noqa: E402
                                convert_split_vector_to_split_matrix, get_blend_from_list, normalize,
                                parse_and_normalize_split, save_i64)

# ---------------------------------------------------------------- the C++ standard's engines

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


class MT19937:
    """std::mt19937: init_genrand seeding, the reference twist and tempering."""

    def __init__(self, seed):
        self.mt = [seed & M32]
        for i in range(1, 624):
            prev = self.mt[i - 1]
            self.mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & M32)
        self.index = 624

    def __call__(self):
        if self.index >= 624:
            mt = self.mt
            for i in range(624):
                y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & M32


class MT19937_64:
    """std::mt19937_64 (Nishimura and Matsumoto's mt19937-64)."""

    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            mt = self.mt
            for i in range(312):
                x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
                mt[i] = mt[(i + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.index = 0
        x = self.mt[self.index]
        self.index += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & M64


def self_check():
    # [rand.predef]: the 10000th output of a default-constructed engine (seed 5489).
    g32 = MT19937(5489)
    for _ in range(9999):
        g32()
    assert g32() == 4123659995
    g64 = MT19937_64(5489)
    for _ in range(9999):
        g64()
    assert g64() == 9981545732273789042
    # std::mt19937(s) is NumPy's legacy seeding of MT19937.
    bit_generator = numpy.random.MT19937()
    bit_generator._legacy_seeding(1234)
    g = MT19937(1234)
    assert [g() for _ in range(700)] == bit_generator.random_raw(700).tolist()


# ---------------------------------------------------------------- helpers.cpp build_mapping

LONG_SENTENCE_LEN = 512


def get_target_sample_len(short_seq_ratio, max_length, rand32_gen):
    if short_seq_ratio == 0:
        return max_length
    random_number = rand32_gen()
    if random_number % short_seq_ratio == 0:
        return 2 + random_number % (max_length - 1)
    return max_length


def c_round(x):
    """C's round: half away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def build_mapping(docs, sizes, num_epochs, max_num_samples, max_seq_length, short_seq_prob, seed, verbose,
                  min_num_sent):
    assert num_epochs > 0 and max_seq_length > 1 and 0.0 <= short_seq_prob <= 1.0 and seed > 0
    docs = docs.tolist()
    sizes = sizes.tolist()
    if max_num_samples is None:  # one epoch (Megatron's binding would reject None)
        max_num_samples = 2 ** 64 - 1
    short_seq_ratio = 0
    if short_seq_prob > 0:
        short_seq_ratio = c_round(1.0 / short_seq_prob)
    maps = None
    num_samples = -1
    for iteration in range(2):
        rand32_gen = MT19937(seed)
        second = iteration == 1
        map_index = 0
        for epoch in range(num_epochs):
            if map_index >= max_num_samples:
                break
            map_index_at_epoch_start = map_index
            for doc in range(len(docs) - 1):
                sent_index_first = docs[doc]
                sent_index_last = docs[doc + 1]
                prev_start_index = sent_index_first
                num_remain_sent = sent_index_last - sent_index_first
                contains_long_sentence = False
                if num_remain_sent > 1:
                    for sent_index in range(sent_index_first, sent_index_last):
                        if sizes[sent_index] > LONG_SENTENCE_LEN:
                            contains_long_sentence = True
                            break
                if num_remain_sent >= min_num_sent and not contains_long_sentence:
                    seq_len = 0
                    num_sent = 0
                    target_seq_len = get_target_sample_len(short_seq_ratio, max_seq_length, rand32_gen)
                    for sent_index in range(sent_index_first, sent_index_last):
                        seq_len += sizes[sent_index]
                        num_sent += 1
                        num_remain_sent -= 1
                        if ((seq_len >= target_seq_len and num_remain_sent > 1 and num_sent >= min_num_sent)
                                or num_remain_sent == 0):
                            if second:
                                maps[map_index] = (prev_start_index, sent_index + 1, target_seq_len)
                            map_index += 1
                            prev_start_index = sent_index + 1
                            target_seq_len = get_target_sample_len(short_seq_ratio, max_seq_length, rand32_gen)
                            seq_len = 0
                            num_sent = 0
            # Megatron would run through all 2^31 epochs here; the tests never ask for that.
            assert map_index > map_index_at_epoch_start or epoch + 1 == num_epochs, "no sample in an epoch"
        if not second:
            maps = numpy.zeros((map_index, 3), dtype=numpy.uint32)
            num_samples = map_index
    rand64_gen = MT19937_64(seed + 1)
    for i in range(num_samples - 1, 0, -1):
        j = rand64_gen() % (i + 1)
        maps[[i, j]] = maps[[j, i]]
    return maps


# ---------------------------------------------------------------- masked_dataset.py / bert_dataset.py

class Tokenizer:
    """What the dataset uses of Megatron's BERT tokenizer: inv_vocab and the special ids."""

    def __init__(self, vocab_file, cls, sep, mask, pad):
        self.vocab = {}
        with open(vocab_file, encoding="utf-8") as reader:  # load_vocab
            index = 0
            while True:
                token = reader.readline()
                if not token:
                    break
                token = token.strip()
                self.vocab[token] = index
                index += 1
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.cls, self.sep, self.mask, self.pad = cls, sep, mask, pad


class BERTMaskedWordPieceDataset:
    def __init__(self, dataset, indices, num_samples, split_name, config):
        self.dataset = dataset
        self.indices = indices
        self.num_samples = num_samples
        self.split_name = split_name
        self.config = config
        self.token_lookup = list(config.tokenizer.inv_vocab.keys())
        self.sample_index = self._build_sample_index(config.sequence_length - 3, 2 if config.classification_head else 1)

    def _build_sample_index(self, sequence_length, min_sentences_per_sample):
        if self.num_samples is not None:
            num_epochs = numpy.iinfo(numpy.int32).max - 1
        else:
            num_epochs = 1
        indices = numpy.append(self.indices, self.indices[-1] + 1)
        return build_mapping(self.dataset.document_indices[indices], self.dataset.sequence_lengths, num_epochs,
                             self.num_samples, sequence_length, self.config.short_sequence_probability,
                             self.config.random_seed, False, min_sentences_per_sample)

    def __len__(self):
        return self.sample_index.shape[0]

    def _create_masked_lm_predictions(self, token_ids, target_sequence_length, numpy_random_state):
        boundaries = []
        candidates = []
        for i, token_id in enumerate(token_ids):
            if token_id == self.config.tokenizer.cls or token_id == self.config.tokenizer.sep:
                boundaries.append(1)
            else:
                if not self.config.tokenizer.inv_vocab[token_id].startswith("##"):
                    boundaries.append(1)
                    candidates.append([i])
                else:
                    boundaries.append(0)
                    if self.config.masking_do_full_word and len(candidates) > 0:
                        candidates[-1].append(i)
                    else:
                        candidates.append([i])

        n_maskings = min(
            self.config.masking_probability * target_sequence_length,
            max(1, int(round(len(token_ids) * self.config.masking_probability))),
        )

        ngram_nvals = numpy.arange(self.config.masking_max_ngram, dtype=numpy.int64) + 1
        nprobs = 1.0 / ngram_nvals
        nprobs = nprobs / nprobs.sum(keepdims=True)
        if self.config.masking_use_longer_ngrams:
            nprobs = nprobs[::-1]

        candidate_ngrams = [
            [candidates[idx: idx + n] for n in ngram_nvals] for idx in range(len(candidates))
        ]
        numpy_random_state.shuffle(candidate_ngrams)

        masked_token_ids = list(token_ids)
        masked_positions_and_labels = []
        masked_spans = []
        masked_indices = set()
        for candidate_idx in range(len(candidate_ngrams)):
            n_ngrams = len(candidate_ngrams[candidate_idx])
            if len(masked_positions_and_labels) >= n_maskings:
                break
            if not candidate_ngrams[candidate_idx]:
                continue
            p = nprobs[:n_ngrams] / nprobs[:n_ngrams].sum(keepdims=True)
            n = numpy_random_state.choice(ngram_nvals[:n_ngrams], p=p)
            while True:
                ngram_indices = sum(candidate_ngrams[candidate_idx][n - 1], [])
                n = n - 1
                if n_maskings >= len(masked_positions_and_labels) + len(ngram_indices):
                    skip_candidate = False
                    break
                if n == 0:
                    skip_candidate = True
                    break
            if skip_candidate:
                continue
            if any(map(lambda idx: idx in masked_indices, ngram_indices)):
                continue
            for index in ngram_indices:
                masked_indices.add(index)
                mask = self._get_token_mask(numpy_random_state)
                if mask is None:
                    masked_token_ids[index] = token_ids[index]
                else:
                    masked_token_ids[index] = mask
                masked_positions_and_labels.append((index, token_ids[index]))
            masked_spans.append((ngram_indices, [token_ids[index] for index in ngram_indices]))

        assert len(masked_positions_and_labels) <= n_maskings
        numpy_random_state.shuffle(candidate_ngrams)

        masked_positions_and_labels = sorted(masked_positions_and_labels, key=lambda x: x[0])
        masked_positions = [position for position, _ in masked_positions_and_labels]
        masked_labels = [label for _, label in masked_positions_and_labels]
        return masked_token_ids, masked_positions, masked_labels, boundaries, masked_spans

    def _get_token_mask(self, numpy_random_state):
        if numpy_random_state.random() < 0.8:
            return self.config.tokenizer.mask
        else:
            if numpy_random_state.random() >= 0.5:
                return self.token_lookup[numpy_random_state.randint(0, len(self.token_lookup))]
        return None

    def __getitem__(self, idx):
        idx_beg, idx_end, target_sequence_length = self.sample_index[idx]
        sample = [self.dataset.get(i) for i in range(idx_beg, idx_end)]
        numpy_random_state = numpy.random.RandomState(seed=(self.config.random_seed + idx) % 2 ** 32)

        assert target_sequence_length <= self.config.sequence_length

        pivot = len(sample)
        is_next_random = False
        if self.config.classification_head:
            assert len(sample) > 1, "the sample must contain at least two sentences"
            pivot = 1
            if len(sample) >= 3:
                pivot = numpy_random_state.randint(low=1, high=len(sample))
            is_next_random = numpy_random_state.random() < 0.5
        split_A = []
        for sample_a in sample[:pivot]:
            split_A.extend(sample_a)
        split_B = []
        for sample_b in sample[pivot:]:
            split_B.extend(sample_b)
        if is_next_random:
            split_A, split_B = split_B, split_A

        length_A = len(split_A)
        length_B = len(split_B)
        if length_A + length_B <= target_sequence_length:
            truncated = False
        else:
            while length_A + length_B > target_sequence_length:
                split = split_A if length_A > length_B else split_B
                if numpy_random_state.random() < 0.5:
                    del split[0]
                else:
                    del split[-1]
                length_A = len(split_A)
                length_B = len(split_B)
            truncated = True

        tokens = [self.config.tokenizer.cls, *split_A, self.config.tokenizer.sep]
        assignments = [0 for _ in range(1 + len(split_A) + 1)]
        if split_B:
            tokens += [*split_B, self.config.tokenizer.sep]
            assignments += [1 for _ in range(len(split_B) + 1)]
        tokens = [int(t) for t in tokens]

        tokens, masked_positions, masked_labels, _, _ = self._create_masked_lm_predictions(
            tokens, target_sequence_length, numpy_random_state)

        length_toks = len(tokens)
        length_pads = self.config.sequence_length - length_toks
        assert length_pads >= 0

        tokens = numpy.array(tokens, dtype=numpy.int64)
        tokens = numpy.pad(tokens, (0, length_pads), constant_values=self.config.tokenizer.pad)
        assignments = numpy.array(assignments, dtype=numpy.int64)
        assignments = numpy.pad(assignments, (0, length_pads), constant_values=self.config.tokenizer.pad)
        mask_pads = numpy.ones(length_toks, dtype=numpy.int64)
        mask_pads = numpy.pad(mask_pads, (0, length_pads), constant_values=self.config.tokenizer.pad)
        labels = numpy.zeros(self.config.sequence_length, dtype=numpy.int64) - 1
        labels[masked_positions] = masked_labels
        mask_loss = numpy.zeros(self.config.sequence_length, dtype=numpy.int64)
        mask_loss[masked_positions] = 1
        return {"text": tokens, "types": assignments, "labels": labels, "is_random": int(is_next_random),
                "padding_mask": mask_pads, "loss_mask": mask_loss, "truncated": int(truncated)}


class Config:
    masking_max_ngram = 3
    masking_do_full_word = True
    masking_do_permutation = False
    masking_use_longer_ngrams = False
    masking_use_geometric_distribution = False


# ---------------------------------------------------------------- blended_megatron_dataset_builder.py

def build_splits(prefix, split, sizes, config):
    low_level_dataset = IndexedDataset(prefix)
    num_elements = low_level_dataset.document_indices.shape[0] - 1  # numel_low_level_dataset: documents
    out = []
    for i, name in enumerate(["train", "valid", "test"]):
        if split[i] is None:
            out.append(None)
            continue
        beg = int(round(split[i][0] * float(num_elements)))
        end = int(round(split[i][1] * float(num_elements)))
        indexed_indices = numpy.arange(start=beg, stop=end, step=1, dtype=numpy.int32)
        if beg == end and sizes[i] == 0:
            out.append(None)
            continue
        out.append(BERTMaskedWordPieceDataset(low_level_dataset, indexed_indices, sizes[i], name, config))
    return out


def build_datasets(data_path, split_string, sizes, config, surplus=0.005):
    prefixes, weights = get_blend_from_list(data_path)
    split = convert_split_vector_to_split_matrix(parse_and_normalize_split(split_string))
    if weights is not None:
        weights = normalize(weights)
    if len(prefixes) == 1 and weights is None:
        return build_splits(prefixes[0], split, sizes, config)
    if weights is None:
        buffer = [[None for _ in range(3)] for _ in prefixes]
    else:
        target = _get_size_per_split_per_dataset(weights, sizes)
        buffer = _get_size_per_split_per_dataset(weights, sizes, surplus=surplus)
    per_split = [[] for _ in range(3)]
    for i, prefix in enumerate(prefixes):
        parts = build_splits(prefix, split, buffer[i], config)
        for j in range(3):
            per_split[j].append(parts[j])
    blended = [None] * 3
    for i in range(3):
        if split[i] is None:
            continue
        if weights is not None:
            size_i = sum(list(zip(*target))[i])
            blended[i] = BlendedDataset(per_split[i], weights, size_i)
        else:
            lengths = [len(d) for d in per_split[i]]
            blended[i] = BlendedDataset(per_split[i], lengths, min(sizes[i], sum(lengths)))
    return blended


# ---------------------------------------------------------------- modes

def mode_mt(args):
    g32, g64 = MT19937(args.seed), MT19937_64(args.seed)
    save_i64(os.path.join(args.out, "mt19937.i64"), [g32() for _ in range(args.count)])
    # As int64: the bits of each 64-bit output.
    values = [g64() for _ in range(args.count)]
    save_i64(os.path.join(args.out, "mt19937_64.i64"), [v - 2 ** 64 if v >= 2 ** 63 else v for v in values])


def mode_draws(args):
    rng = numpy.random.RandomState(args.seed)
    out = []
    for _ in range(args.count):
        out.append(numpy.array([rng.random()], dtype=numpy.float64).view(numpy.int64)[0])
        for n in (2, 3, 100, 70000, 2 ** 33):
            out.append(rng.randint(0, n))
            out.append(rng.randint(1, n))
    save_i64(os.path.join(args.out, "draws.i64"), out)


def mode_bert(args):
    config = Config()
    config.random_seed = args.seed
    config.sequence_length = args.seq_length
    config.masking_probability = args.mask_prob
    config.short_sequence_probability = args.short_seq_prob
    config.classification_head = bool(args.binary_head)
    config.tokenizer = Tokenizer(args.vocab, args.cls, args.sep, args.mask, args.pad)
    sizes = [int(s) for s in args.sizes.split(",")]
    datasets = build_datasets(args.data_path, args.split, sizes, config)
    summary = {"splits": []}
    for i, name in enumerate(["train", "valid", "test"]):
        dataset = datasets[i]
        if dataset is None:
            summary["splits"].append(None)
            continue
        entry = {"size": len(dataset)}
        if isinstance(dataset, BlendedDataset):
            entry["kind"] = "blended"
            entry["weights"] = dataset.weights
            entry["part_sizes"] = [len(p) for p in dataset.datasets]
            save_i64(os.path.join(args.out, f"{name}-dataset_index.i64"), dataset.dataset_index)
            save_i64(os.path.join(args.out, f"{name}-dataset_sample_index.i64"), dataset.dataset_sample_index)
            for p, part in enumerate(dataset.datasets):
                save_i64(os.path.join(args.out, f"{name}-{p}-mapping.i64"), part.sample_index)
        else:
            entry["kind"] = "bert"
            entry["documents"] = [int(dataset.indices[0]), int(dataset.indices[-1]) + 1]
            save_i64(os.path.join(args.out, f"{name}-mapping.i64"), dataset.sample_index)
        rows = []
        for j in range(len(dataset)):
            s = dataset[j]
            rows.append(numpy.concatenate([s["text"], s["types"], s["labels"], s["loss_mask"], s["padding_mask"],
                                           [s["is_random"], s["truncated"]]]))
        save_i64(os.path.join(args.out, f"{name}-samples.i64"), numpy.concatenate(rows) if rows else [])
        summary["splits"].append(entry)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mt", "draws", "bert"])
    parser.add_argument("--out", default=".")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--data-path", nargs="*", default=[])
    parser.add_argument("--split", default="969, 30, 1")
    parser.add_argument("--seq-length", type=int, default=0)
    parser.add_argument("--sizes", default="")
    parser.add_argument("--mask-prob", type=float, default=0.15)
    parser.add_argument("--short-seq-prob", type=float, default=0.1)
    parser.add_argument("--binary-head", type=int, default=1)
    parser.add_argument("--vocab", default="")
    parser.add_argument("--cls", type=int, default=0)
    parser.add_argument("--sep", type=int, default=0)
    parser.add_argument("--mask", type=int, default=0)
    parser.add_argument("--pad", type=int, default=0)
    args = parser.parse_args()
    self_check()
    {"mt": mode_mt, "draws": mode_draws, "bert": mode_bert}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
