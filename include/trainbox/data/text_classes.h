// trainbox/data/text_classes.h — labelled text for sequence classification (data.dataset =
// "text_classes"): a JSON Lines file, one example a line,
//   {"text": "a sentence", "label": "positive"}      text as UTF-8 bytes (token id = byte)
//   {"ids": [101, 2023, 102], "label": 1}              token ids made by a tokenizer (BERT's [CLS] … [SEP])
// Labels are all integers (classes = the largest + 1) or all strings (classes = the distinct
// names in sorted order, listed in the description). x is int64 [B, block_size]: each example cut
// to block_size tokens (counted as truncations) and padded with id 0 (byte NUL, BERT's [PAD]; the
// bert model masks id model.pad_token_id out of attention). y is the class, int64 [B].
// The val split is data.val_path (another such file), else the last data.text_holdout of the lines.
// A line that is not JSON, lacks "label" or both "text" and "ids", holds a negative or non-integer
// id, or mixes label kinds is a DataError naming file:line (exit 2).
//
//   auto s = trainbox::data::load_text_classes(cfg.data, cfg.model.block_size);
#pragma once
#include <cstdint>

#include <trainbox/data/config.h>
#include <trainbox/data/source.h>

namespace trainbox::data {

Splits load_text_classes(const DataConfig& cfg, std::int64_t block_size);

}  // namespace trainbox::data
