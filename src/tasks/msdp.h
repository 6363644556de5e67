// Multi-stage prompting for knowledgeable dialogue (MSDP; Liu et al. 2022), as Megatron's tasks/msdp:
// the data preparation (tasks/msdp/preprocessing.py) and the prompts of its two stages
// (tasks/msdp/prompt.py). Stage 1 asks a language model for knowledge about the last turn of a dialogue,
// from examples chosen by similarity; stage 2 asks for the response from that knowledge, from 20 fixed
// examples. No training. Generation itself is the caller's (a local model or a running `serve`).
//
// Megatron ranks examples by DPR question-encoder embeddings; Tessera has no DPR encoder, so similarity
// here is the cosine of TF-IDF vectors over normalized words (normalize_answer), computed over the
// training dialogues. The rest follows Megatron's code, quirks included (noted where they are).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::tasks {

// One Wizard turn of a processed file: "topic \t context \t knowledge \t response", the context's turns
// joined by " [SEP] ".
struct DialogueSample {
  std::string topic, context, knowledge, response;
  std::vector<std::string> turns() const;  // the context split at " [SEP] "
  std::string line() const;                // the processed-file line, without its newline
};

// A processed file; an Error naming the file and line when a line has fewer than 4 tab-separated fields.
std::vector<DialogueSample> read_processed(const std::string& path);

// process_wow_dataset: every Wizard turn after the first turn of each dialogue of Wizard of Wikipedia's
// JSON (a list of {"chosen_topic", "dialog": [{"speaker", "text", "checked_sentence", "checked_passage"}]}).
// A turn not ending in ?, . or ! gets a period; the knowledge is the checked sentence or
// "no_passages_used"; the topic the checked passage, else the chosen topic.
std::vector<DialogueSample> process_wow(const nlohmann::json& dialogues);

enum class MsdpDataType { WowSeen, WowUnseen, Woi };
MsdpDataType parse_msdp_data_type(const std::string& name);  // wow_seen, wow_unseen, woi

// get_knwl_gen_prompts: for each test sample, its key ("topic last_turn") and the stage-1 examples
// "( last_turn ) topic => knowledge", the most similar last. A topic seen in training takes the
// `examples` most similar training turns of that topic; another topic takes `examples` turns of distinct
// topics from all training dialogues (filtered: knowledge of at most 20 words, not starting It/This). In
// that branch Megatron's code walks the similarities in ascending order (torch.sort), so it picks the
// least similar: `most_similar_unseen` false reproduces that, true takes the most similar instead.
struct KnowledgePrompt {
  std::string key;
  std::vector<std::string> examples;
};
std::vector<KnowledgePrompt> select_knowledge_prompts(const std::vector<DialogueSample>& test,
                                                      const std::vector<DialogueSample>& train, MsdpDataType type,
                                                      bool most_similar_unseen = false, int64_t examples = 10);

// Whether a training turn's response copies its knowledge as get_resp_gen_prompts wants: runs of at
// least 10 response tokens found in the knowledge cover 60-90% of the response and at least 80% of the
// knowledge (NLTK-style tokens, tasks/word_tokenize.h).
bool response_copies_knowledge(const std::string& knowledge, const std::string& response);

// get_resp_gen_prompts: the training turns that copy their knowledge, as stage-2 examples
// "Topic: t. User says: u We know that: k System replies: r", shuffled with `seed` (std::mt19937_64, not
// numpy's order), the first `count` of them.
std::vector<std::string> select_response_prompts(const std::vector<DialogueSample>& train, uint64_t seed,
                                                 int64_t count = 20);

// The model inputs: stage 1, the sample's examples then "( last_turn ) topic =>"; stage 2, the examples
// then "Topic: t. User says: u We know that: k System replies:" with the sample's (generated) knowledge.
// Each example is stripped and followed by " \n".
std::string knowledge_generation_input(const DialogueSample& sample, const std::vector<std::string>& examples);
std::string response_generation_input(const DialogueSample& sample, const std::vector<std::string>& examples);

// What a generation contributes: the text after the prompt, up to its first newline, stripped.
std::string msdp_output(const std::string& continuation);

// prepare_input: the test samples with their knowledge replaced by the generated lines ("<|endoftext|>"
// removed); an Error when the counts differ.
std::vector<DialogueSample> with_generated_knowledge(const std::vector<DialogueSample>& test,
                                                     const std::vector<std::string>& knowledge);

}  // namespace tessera::tasks
