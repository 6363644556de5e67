// The index parser accepts a well-formed index and rejects each kind of malformed one with an error
// naming the index and the entry (fuzz/checkpoint_index_fuzzer.cc searches for crashes).
#include "ckpt/checkpoint_index.h"

#include <gtest/gtest.h>

#include <functional>

namespace tessera::ckpt {
namespace {

using nlohmann::json;

json valid_index() {
  const std::string crc = "crc32c:0123abcd";
  return {{"format", "tessera-checkpoint"}, {"version", 2}, {"iteration", 10}, {"consumed_train_samples", 80},
          {"skipped_iterations", 0}, {"seed", 1234}, {"optimizer_steps", 10}, {"has_optimizer", true},
          {"args", json::object()},
          {"files", {{"model.tp00.pp00.safetensors", {{"bytes", 100}, {"crc32c", crc}}},
                     {"model.tp01.pp00.safetensors", {{"bytes", 100}, {"crc32c", crc}}}}},
          {"tensors",
           {{"w", {{"global_shape", {8, 6}},
                   {"slices", {{{"file", "model.tp00.pp00.safetensors"}, {"key", "w"}, {"shape", {4, 6}},
                                {"dtype", "fp32"}, {"view", {2, 4, 6}}, {"dim", 1}, {"offset", 0}, {"length", 2},
                                {"crc32c", crc}},
                               {{"file", "model.tp01.pp00.safetensors"}, {"key", "w"}, {"shape", {4, 6}},
                                {"dtype", "fp32"}, {"view", {2, 4, 6}}, {"dim", 1}, {"offset", 2}, {"length", 2},
                                {"crc32c", crc}}}}}},
            {"n", {{"global_shape", {6}},
                   {"slices", {{{"file", "model.tp00.pp00.safetensors"}, {"key", "n"}, {"shape", {6}},
                                {"dtype", "fp32"}, {"view", {6}}, {"dim", -1}, {"offset", 0}, {"length", 0},
                                {"crc32c", crc}}}}}}}}};
}

TEST(CheckpointIndex, ParsesAValidIndex) {
  CheckpointIndex index = parse_checkpoint_index(valid_index().dump(), "index.json");
  EXPECT_EQ(index.iteration, 10);
  EXPECT_EQ(index.files.at("model.tp01.pp00.safetensors").crc32c, 0x0123abcdu);
  const SavedSlice& s = index.tensors.at("w").slices.at(1);
  EXPECT_EQ(s.box, (Box{{2, 4, 6}, 1, 2, 4}));
  EXPECT_EQ(s.shape, (Shape{4, 6}));
  EXPECT_EQ(index.tensors.at("n").slices.at(0).box, Box::whole({6}));
  EXPECT_FALSE(s.piece);
}

// The distributed optimizer's moments are saved in pieces: element ranges of a slice's storage.
TEST(CheckpointIndex, ParsesPiecesOfASlice) {
  json j = valid_index();
  json piece = j["tensors"]["w"]["slices"][1];
  piece["shape"] = {10};
  piece["piece"] = {14, 24};
  j["tensors"]["w"]["slices"][1] = piece;
  json whole_piece = j["tensors"]["n"]["slices"][0];
  whole_piece["shape"] = {2};
  whole_piece["piece"] = {4, 6};
  j["tensors"]["n"]["slices"][0] = whole_piece;
  CheckpointIndex index = parse_checkpoint_index(j.dump(), "index.json");
  EXPECT_EQ(index.tensors.at("w").slices.at(1).piece, std::make_pair(int64_t{14}, int64_t{24}));
  EXPECT_EQ(index.tensors.at("w").slices.at(1).box, (Box{{2, 4, 6}, 1, 2, 4}));
  EXPECT_EQ(index.tensors.at("n").slices.at(0).box, Box::whole({6}));
}

void expect_rejected(const std::string& text, const std::string& needle) {
  try {
    parse_checkpoint_index(text, "ckpt/index.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/index.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CheckpointIndex, RejectsMalformedIndexes) {
  expect_rejected("{ not json", "is not valid JSON");
  expect_rejected("[1, 2]", "is not a JSON object");
  auto with = [](const std::function<void(json&)>& edit) {
    json j = valid_index();
    edit(j);
    return j.dump();
  };
  expect_rejected(with([](json& j) { j["version"] = 99; }), "has version 99");
  expect_rejected(with([](json& j) { j.erase("iteration"); }), "has no field 'iteration'");
  expect_rejected(with([](json& j) { j["iteration"] = "ten"; }), "field 'iteration' is string");
  expect_rejected(with([](json& j) { j["files"]["../etc/passwd"] = {{"bytes", 1}, {"crc32c", "crc32c:00000000"}}; }),
                  "is not a plain file name");
  expect_rejected(with([](json& j) { j["files"]["model.tp00.pp00.safetensors"]["crc32c"] = "md5:x"; }),
                  "is not of the form crc32c:");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["file"] = "other.safetensors"; }),
                  "which the index does not list");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["dim"] = 3; }), "is outside view");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["length"] = 5; }), "runs past dimension 1");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["view"] = {2, 4, 7}; }),
                  "is not a view of the global shape");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["shape"] = {5, 6}; }), "but its range holds");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["global_shape"] = {1LL << 40, 1LL << 40}; }), "is too large");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["global_shape"] = {-8, 6}; }), "non-negative integers");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"] = json::array(); }), "has no slices");
  expect_rejected(with([](json& j) { j["tensors"]["n"]["slices"][0].erase("crc32c"); }), "has no field 'crc32c'");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["piece"] = {3}; }), "is not a pair of integers");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["piece"] = {20, 30}; }),
                  "piece [20, 30) is not a non-empty range of the slice's 24 elements");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["piece"] = {4, 4}; }), "is not a non-empty range");
  expect_rejected(with([](json& j) { j["tensors"]["w"]["slices"][0]["piece"] = {0, 10}; }),
                  "has shape [4, 6] but its range holds 10 elements");
  expect_rejected(with([](json& j) { j["loss_scaler"] = 3; }), "field 'loss_scaler' is not an object");
}

TEST(CheckpointIndex, Crc32cStrings) {
  EXPECT_EQ(parse_crc32c("crc32c:deadbeef"), 0xdeadbeefu);
  EXPECT_FALSE(parse_crc32c("crc32c:DEADBEEF"));
  EXPECT_FALSE(parse_crc32c("crc32c:dead"));
  EXPECT_FALSE(parse_crc32c("crc32c:deadbeefff"));
}

}  // namespace
}  // namespace tessera::ckpt
