#!/usr/bin/python3
"""Reference values for the data-layer tests, computed independently of the C++ code.

Megatron-LM's dataset functions are transcribed here as Megatron writes them
(megatron/core/datasets/{indexed_dataset,gpt_dataset,blended_dataset,
blended_megatron_dataset_builder,blended_megatron_dataset_config,utils}.py and the loops of
helpers.cpp, Megatron-LM core as of 2025), with NumPy's own RandomState doing the shuffles. Only
what torch, logging, caching and multiprocessing add is left out.

Usage (each mode writes little-endian int64 arrays, *.i64, and/or JSON into --out):
  raw      --seed S --count K                 MT19937 outputs after RandomState(S)'s seeding
  shuffle  --seed S --lengths n1,n2,...       successive RandomState(S).shuffle(arange(n)) results
  write    --prefix P --dtype D --docs J      a dataset written as Megatron's builder writes it
  npy      --input F                          numpy.save of numpy.load(F) (byte comparison)
  blend    --weights w1,w2,... --size N       BlendedDataset's indices for a --data-path blend
  gpt      --data-path ... --split S --seq-length L --seed X --sizes a,b,c
           train/valid/test datasets as BlendedMegatronDatasetBuilder builds them
"""

import argparse
import functools
import json
import math
import os
import re
import struct
import sys

import numpy

# ---------------------------------------------------------------- indexed_dataset.py

_INDEX_HEADER = b"MMIDIDX\x00\x00"
_DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
           6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
_CODES = {v: k for k, v in _DTYPES.items()}


def write_dataset(prefix, dtype, documents):
    """IndexedDatasetBuilder.add_item/end_document + finalize (_IndexWriter), as in Megatron."""
    sequence_lengths = []
    document_indices = [0]
    with open(prefix + ".bin", "wb") as data_file:
        for document in documents:
            for sequence in document:
                np_array = numpy.array(sequence, dtype=dtype)
                data_file.write(np_array.tobytes(order="C"))
                sequence_lengths.append(np_array.size)
            document_indices.append(len(sequence_lengths))
    with open(prefix + ".idx", "wb") as idx_writer:
        idx_writer.write(_INDEX_HEADER)
        idx_writer.write(struct.pack("<Q", 1))
        idx_writer.write(struct.pack("<B", _CODES[dtype]))
        itemsize = numpy.int64(numpy.dtype(dtype).itemsize)
        curr_ptr = numpy.int64(0)
        sequence_pointers = []
        for length in sequence_lengths:
            sequence_pointers.append(curr_ptr.item())
            curr_ptr += length * itemsize
        idx_writer.write(struct.pack("<Q", len(sequence_lengths)))
        idx_writer.write(struct.pack("<Q", len(document_indices)))
        idx_writer.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        idx_writer.write(numpy.array(sequence_pointers, dtype=numpy.int64).tobytes(order="C"))
        idx_writer.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))


class IndexedDataset:
    """_IndexReader + _MMapBinReader."""

    def __init__(self, path_prefix):
        self.path_prefix = path_prefix
        with open(path_prefix + ".idx", "rb") as stream:
            header = stream.read(9)
            assert header == _INDEX_HEADER, f"bad header, cannot read: {path_prefix}.idx"
            version = struct.unpack("<Q", stream.read(8))[0]
            assert version == 1, f"bad version, cannot read: {path_prefix}.idx"
            code = struct.unpack("<B", stream.read(1))[0]
            self.dtype = _DTYPES[code]
            self.sequence_count = struct.unpack("<Q", stream.read(8))[0]
            self.document_count = struct.unpack("<Q", stream.read(8))[0]
            offset = stream.tell()
        buffer = numpy.memmap(path_prefix + ".idx", mode="r", order="C")
        self.sequence_lengths = numpy.frombuffer(buffer, dtype=numpy.int32, count=self.sequence_count, offset=offset)
        self.sequence_pointers = numpy.frombuffer(buffer, dtype=numpy.int64, count=self.sequence_count,
                                                  offset=offset + self.sequence_lengths.nbytes)
        self.document_indices = numpy.frombuffer(
            buffer, dtype=numpy.int64, count=self.document_count,
            offset=offset + self.sequence_lengths.nbytes + self.sequence_pointers.nbytes)
        self.bin = numpy.memmap(path_prefix + ".bin", mode="r", order="C")
        assert self.sequence_lengths.shape[0] == self.document_indices[-1]

    def get(self, idx, offset=0, length=None):
        sequence_pointer, sequence_length = self.sequence_pointers[idx], self.sequence_lengths[idx]
        if length is None:
            length = sequence_length - offset
        sequence_pointer += offset * numpy.dtype(self.dtype).itemsize
        return numpy.frombuffer(self.bin, dtype=self.dtype, count=length, offset=sequence_pointer)


# ---------------------------------------------------------------- utils.py / config

def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    w_sum = numpy.sum(w)
    w = (w / w_sum).tolist()
    return w


def get_blend_from_list(blend):
    if len(blend) % 2 == 1:
        weight_per_dataset = None
        raw_prefix_per_dataset = blend
    else:
        raw_weight_per_dataset, raw_prefix_per_dataset = zip(
            *[(blend[i], blend[i + 1]) for i in range(0, len(blend), 2)])
        weight_per_dataset = []
        for rwpd in raw_weight_per_dataset:
            try:
                weight = float(rwpd)
            except ValueError:
                weight = None
            weight_per_dataset.append(weight)
        is_none = map(lambda _: _ is None, weight_per_dataset)
        if any(is_none):
            assert all(is_none)
            weight_per_dataset = None
            raw_prefix_per_dataset = blend
    prefix_per_dataset = [rppd.strip() for rppd in raw_prefix_per_dataset]
    return prefix_per_dataset, weight_per_dataset


def parse_and_normalize_split(split):
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3
    assert all(map(lambda _: _ >= 0.0, split))
    split = normalize(split)
    return split


def convert_split_vector_to_split_matrix(vector_a, vector_b=None):
    if vector_b is None:
        vector_b = vector_a
    expansion_a = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector_a])
    expansion_b = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector_b])
    bookends_a = list(zip(expansion_a[:-1], expansion_a[1:]))
    bookends_b = list(zip(expansion_b[:-1], expansion_b[1:]))
    matrix = []
    for bookend_a, bookend_b in zip(bookends_a, bookends_b):
        if min(bookend_a[1], bookend_b[1]) <= max(bookend_a[0], bookend_b[0]):
            overlap = None
        else:
            overlap = (max(bookend_a[0], bookend_b[0]), min(bookend_a[1], bookend_b[1]))
        matrix.append(overlap)
    return matrix


# ---------------------------------------------------------------- helpers.cpp, as Python loops

def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch,
                     drop_last_partial_sequence=True, add_extra_token_to_sequence=1):
    if drop_last_partial_sequence:
        num_samples = (num_epochs * tokens_per_epoch - add_extra_token_to_sequence) // seq_length
    else:
        num_samples = math.ceil(float(num_epochs * tokens_per_epoch - add_extra_token_to_sequence) / seq_length)
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    sample_idx_index = 0
    document_idx_index = 0
    doc_offset = 0
    sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
    sample_idx_index += 1
    sizes = sizes.tolist()
    document_idx = document_idx.tolist()
    while sample_idx_index <= num_samples:
        remaining_seq_length = seq_length + add_extra_token_to_sequence
        while remaining_seq_length != 0:
            document_index = document_idx[document_idx_index]
            document_length = sizes[document_index] - doc_offset
            remaining_seq_length -= document_length
            if remaining_seq_length <= 0:
                doc_offset += remaining_seq_length + document_length - add_extra_token_to_sequence
                remaining_seq_length = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    assert sample_idx_index == num_samples
                    doc_offset = sizes[document_idx[document_idx_index]] - add_extra_token_to_sequence
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
        sample_idx_index += 1
    return sample_idx


def helpers_build_sample_idx(sizes, document_indices, sequence_length, num_epochs, tokens_per_epoch):
    """helpers.py: the int32 or int64 variant."""
    sample_idx_max = max(document_indices.shape[0], sizes.max())
    sample_idx = build_sample_idx(sizes, document_indices, sequence_length, num_epochs, tokens_per_epoch)
    if sample_idx_max <= numpy.iinfo(numpy.int32).max:
        return sample_idx.astype(numpy.int32)
    return sample_idx


def build_blending_indices(weights, num_datasets, size):
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current_samples = [0] * num_datasets
    for sample_idx in range(size):
        sample_idx_double = max(float(sample_idx), 1.0)
        max_error_index = 0
        max_error = weights[0] * sample_idx_double - float(current_samples[0])
        for dataset_idx in range(1, num_datasets):
            error = weights[dataset_idx] * sample_idx_double - float(current_samples[dataset_idx])
            if error > max_error:
                max_error = error
                max_error_index = dataset_idx
        dataset_index[sample_idx] = max_error_index
        dataset_sample_index[sample_idx] = current_samples[max_error_index]
        current_samples[max_error_index] += 1
    return dataset_index, dataset_sample_index


# ---------------------------------------------------------------- gpt_dataset.py

def _build_document_index(documents, num_epochs, numpy_random_state, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1)
        document_index = document_index.astype(numpy.int32)
        numpy_random_state.shuffle(document_index)
        return document_index
    doc_idx_first = _build_document_index(documents, num_epochs - 1, numpy_random_state, False)
    doc_idx_last = _build_document_index(documents, 1, numpy_random_state, False)
    return numpy.concatenate((doc_idx_first, doc_idx_last))


def _build_shuffle_index(num_samples, total_size, numpy_random_state):
    dtype_ = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype_ = numpy.int64
    shuffle_idx_first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    numpy_random_state.shuffle(shuffle_idx_first)
    if num_samples == total_size:
        return shuffle_idx_first
    shuffle_idx_last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    numpy_random_state.shuffle(shuffle_idx_last)
    return numpy.concatenate((shuffle_idx_first, shuffle_idx_last))


class GPTDataset:
    def __init__(self, dataset, indices, num_samples, split_name, sequence_length, random_seed):
        self.dataset = dataset
        self.indices = indices
        self.num_samples = num_samples
        self.split_name = split_name
        self.sequence_length = sequence_length
        self.random_seed = random_seed
        self.add_extra_token_to_sequence = True
        self.document_index, self.sample_index, self.shuffle_index = self._build()

    def _get_num_tokens_per_epoch(self):
        return int(numpy.sum(self.dataset.sequence_lengths[self.indices]))

    def _get_num_epochs(self, num_tokens_per_epoch):
        num_epochs = 1
        num_tokens = num_tokens_per_epoch
        if self.num_samples is None:
            return num_epochs
        num_tokens_requested = (self.num_samples * self.sequence_length) + self.add_extra_token_to_sequence
        while num_tokens < num_tokens_requested:
            num_epochs += 1
            num_tokens += num_tokens_per_epoch
        return num_epochs

    def _build(self):
        sequence_length = self.sequence_length
        num_tokens_per_epoch = self._get_num_tokens_per_epoch()
        num_epochs = self._get_num_epochs(num_tokens_per_epoch)
        if num_epochs == 1:
            separate_final_epoch = False
        else:
            num_samples_sans_final_epoch = (
                (num_epochs - 1) * num_tokens_per_epoch - self.add_extra_token_to_sequence) // sequence_length
            num_samples_from_final_epoch = self.num_samples - num_samples_sans_final_epoch
            num_samples_per_epoch = (num_tokens_per_epoch - self.add_extra_token_to_sequence) // sequence_length
            assert num_samples_from_final_epoch >= 0
            assert num_samples_from_final_epoch <= num_samples_per_epoch + 1
            threshold = 0.80
            separate_final_epoch = num_samples_from_final_epoch < int(threshold * num_samples_per_epoch)
        self.num_epochs = num_epochs
        self.separate_final_epoch = separate_final_epoch

        numpy_random_state = numpy.random.RandomState(self.random_seed)
        document_index = _build_document_index(self.indices, num_epochs, numpy_random_state, separate_final_epoch)
        assert document_index.dtype == numpy.int32
        sample_index = helpers_build_sample_idx(self.dataset.sequence_lengths, document_index, sequence_length,
                                                num_epochs, num_tokens_per_epoch)
        if separate_final_epoch:
            shuffle_index = _build_shuffle_index(num_samples_sans_final_epoch, sample_index.shape[0] - 1,
                                                 numpy_random_state)
        else:
            shuffle_index = _build_shuffle_index(sample_index.shape[0] - 1, sample_index.shape[0] - 1,
                                                 numpy_random_state)
        return document_index, sample_index, shuffle_index

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):
        """_query_document_sample_shuffle_indices (text only)."""
        idx = self.shuffle_index[idx]
        doc_index_beg, doc_index_beg_offset = self.sample_index[idx]
        doc_index_end, doc_index_end_offset = self.sample_index[idx + 1]
        sample_parts = []
        if doc_index_beg == doc_index_end:
            sample_parts.append(self.dataset.get(
                self.document_index[doc_index_beg], offset=doc_index_beg_offset,
                length=doc_index_end_offset - doc_index_beg_offset + self.add_extra_token_to_sequence))
        else:
            for i in range(doc_index_beg, doc_index_end + 1):
                offset = 0 if i > doc_index_beg else doc_index_beg_offset
                length = None if i < doc_index_end else doc_index_end_offset + self.add_extra_token_to_sequence
                sample_parts.append(self.dataset.get(self.document_index[i], offset=offset, length=length))
        text = numpy.concatenate(sample_parts, dtype=numpy.int64)
        assert len(text) == self.sequence_length + 1
        return text


# ---------------------------------------------------------------- blended_dataset.py

class BlendedDataset:
    def __init__(self, datasets, weights, size):
        assert len(datasets) < 32767
        assert len(datasets) == len(weights)
        weights = normalize(weights)
        self.datasets = datasets
        self.weights = weights
        self.size = size
        self.dataset_index, self.dataset_sample_index = build_blending_indices(weights, len(datasets), size)

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        return self.datasets[self.dataset_index[idx]][self.dataset_sample_index[idx]]


# ---------------------------------------------------------------- blended_megatron_dataset_builder.py

def _get_size_per_split_per_dataset(normalized_weights, target_size_per_split, surplus=0.0):
    assert numpy.isclose(sum(normalized_weights), 1.0)
    return [[int(math.ceil(math.ceil(target_size * weight) * (1 + surplus))) for target_size in target_size_per_split]
            for weight in normalized_weights]


def build_megatron_dataset_splits(dataset_path, split, sizes, sequence_length, seed):
    low_level_dataset = IndexedDataset(dataset_path)
    num_elements = low_level_dataset.sequence_lengths.shape[0]
    out = []
    for i, name in enumerate(["train", "valid", "test"]):
        if split[i] is None:
            out.append(None)
            continue
        beg = int(round(split[i][0] * float(num_elements)))
        end = int(round(split[i][1] * float(num_elements)))
        indexed_indices = numpy.arange(start=beg, stop=end, step=1, dtype=numpy.int32)
        out.append(GPTDataset(low_level_dataset, indexed_indices, sizes[i], name, sequence_length, seed))
    return out


def build_datasets(data_path, split_string, sizes, sequence_length, seed, surplus=0.005):
    prefixes, weights = get_blend_from_list(data_path)
    split = convert_split_vector_to_split_matrix(parse_and_normalize_split(split_string))
    if weights is not None:
        weights = normalize(weights)
    if len(prefixes) == 1 and weights is None:
        return build_megatron_dataset_splits(prefixes[0], split, sizes, sequence_length, seed), split
    if weights is None:
        sizes_per_dataset_buffer = [[None for _ in range(3)] for _ in prefixes]
    else:
        sizes_per_dataset_target = _get_size_per_split_per_dataset(weights, sizes)
        sizes_per_dataset_buffer = _get_size_per_split_per_dataset(weights, sizes, surplus=surplus)
    megatron_datasets = [[] for _ in range(3)]
    for i, prefix in enumerate(prefixes):
        per_split = build_megatron_dataset_splits(prefix, split, sizes_per_dataset_buffer[i], sequence_length, seed)
        for j in range(3):
            megatron_datasets[j].append(per_split[j])
    blended = [None] * 3
    for i in range(3):
        if split[i] is None:
            continue
        weights_i = weights
        if weights_i is not None:
            size_i = sum(list(zip(*sizes_per_dataset_target))[i])
        else:
            weights_i = [len(megatron_dataset) for megatron_dataset in megatron_datasets[i]]
            size_i = min(sizes[i], sum(weights_i))
        blended[i] = BlendedDataset(megatron_datasets[i], weights_i, size_i)
    return blended, split


# ---------------------------------------------------------------- modes

def save_i64(path, array):
    numpy.asarray(array, dtype=numpy.int64).astype("<i8").tofile(path)


def describe_gpt(dataset, out, stem):
    save_i64(os.path.join(out, stem + "-document_index.i64"), dataset.document_index)
    save_i64(os.path.join(out, stem + "-sample_index.i64"), dataset.sample_index)
    save_i64(os.path.join(out, stem + "-shuffle_index.i64"), dataset.shuffle_index)
    return {"kind": "gpt", "size": len(dataset), "num_epochs": dataset.num_epochs,
            "separate_final_epoch": bool(dataset.separate_final_epoch),
            "documents": [int(dataset.indices[0]), int(dataset.indices[-1]) + 1],
            "sample_index_dtype": str(dataset.sample_index.dtype),
            "shuffle_index_dtype": str(dataset.shuffle_index.dtype)}


def mode_gpt(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    datasets, split = build_datasets(args.data_path, args.split, sizes, args.seq_length, args.seed)
    summary = {"split_matrix": split, "splits": []}
    for i, name in enumerate(["train", "valid", "test"]):
        dataset = datasets[i]
        if dataset is None:
            summary["splits"].append(None)
            continue
        if isinstance(dataset, BlendedDataset):
            entry = {"kind": "blended", "size": len(dataset), "weights": dataset.weights, "parts": []}
            save_i64(os.path.join(args.out, f"{name}-dataset_index.i64"), dataset.dataset_index)
            save_i64(os.path.join(args.out, f"{name}-dataset_sample_index.i64"), dataset.dataset_sample_index)
            for p, part in enumerate(dataset.datasets):
                entry["parts"].append(describe_gpt(part, args.out, f"{name}-{p}"))
        else:
            entry = describe_gpt(dataset, args.out, name)
        samples = numpy.stack([dataset[j] for j in range(len(dataset))]) if len(dataset) else numpy.zeros(0)
        save_i64(os.path.join(args.out, f"{name}-samples.i64"), samples)
        summary["splits"].append(entry)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f)


def mode_raw(args):
    bit_generator = numpy.random.MT19937()
    bit_generator._legacy_seeding(args.seed)
    # Cross-check the seeding path with RandomState's own state.
    state = numpy.random.RandomState(args.seed).get_state()
    assert (state[1] == bit_generator.state["state"]["key"]).all() and state[2] == 624
    save_i64(os.path.join(args.out, "raw.i64"), bit_generator.random_raw(args.count))


def mode_shuffle(args):
    rng = numpy.random.RandomState(args.seed)
    parts = []
    for n in [int(x) for x in args.lengths.split(",")]:
        a = numpy.arange(n, dtype=numpy.int64)
        rng.shuffle(a)
        parts.append(a)
    save_i64(os.path.join(args.out, "shuffle.i64"), numpy.concatenate(parts))


def mode_write(args):
    with open(args.docs) as f:
        documents = json.load(f)
    write_dataset(args.prefix, getattr(numpy, args.dtype), documents)


def mode_blend(args):
    # The builder normalises the --data-path weights, then BlendedDataset normalises them again.
    weights = normalize(normalize([float(w) for w in args.weights.split(",")]))
    dataset_index, dataset_sample_index = build_blending_indices(weights, len(weights), args.size)
    save_i64(os.path.join(args.out, "dataset_index.i64"), dataset_index)
    save_i64(os.path.join(args.out, "dataset_sample_index.i64"), dataset_sample_index)


def mode_npy(args):
    numpy.save(os.path.join(args.out, "resaved.npy"), numpy.load(args.input))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["raw", "shuffle", "write", "npy", "gpt", "blend"])
    parser.add_argument("--out", default=".")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--lengths", default="")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--dtype", default="int32")
    parser.add_argument("--docs", default="")
    parser.add_argument("--input", default="")
    parser.add_argument("--data-path", nargs="*", default=[])
    parser.add_argument("--split", default="969, 30, 1")
    parser.add_argument("--seq-length", type=int, default=0)
    parser.add_argument("--sizes", default="")
    parser.add_argument("--weights", default="")
    parser.add_argument("--size", type=int, default=0)
    args = parser.parse_args()
    modes = {"raw": mode_raw, "shuffle": mode_shuffle, "write": mode_write, "npy": mode_npy, "gpt": mode_gpt,
             "blend": mode_blend}
    modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
