// trainbox/data/text.h — the `text` dataset: a token stream cut into windows for a
// language model (model.name = "gpt").
//
// data.path is one of
//   * a UTF-8 text file, read as bytes: token = byte, vocab 256. The file must be UTF-8
//     without NUL bytes; anything else is most likely a wrong path (an image, an archive,
//     a token file without its .bin header) and is refused with the offset of the first
//     bad byte.
//   * a directory: every regular file in it that is text by the rule above, sorted by
//     name and concatenated byte for byte (links to a file already taken are read once;
//     other files — e.g. the fortune package's .dat indexes — are skipped and counted in
//     the description). /usr/share/games/fortunes (Debian's `fortunes`) is the corpus of
//     configs/text_gpt.toml.
//   * a token file in the nanoGPT / llm.c `.bin` layout (chosen by the .bin extension or
//     by the magic number at offset 0), vocab = the largest token id + 1:
//
//       offset  size         field
//       0       int32 LE     magic   = 20240520
//       4       int32 LE     version = 1 (tokens are uint16)
//       8       int32 LE     number of tokens N
//       12      253 x int32  unused (zero)
//       1024    N x uint16   the token ids, little-endian
//
//     llm.c's Llama 3 layout is read too (magic 20240801, version 7, uint32 ids). A NAME.mask
//     beside NAME.bin (trainbox/data/token_file.h) gives the loss mask: y = -100 (ignored by the
//     loss) where a target token is not marked, as HF's labels.
//   * a directory written by `trainbox data tokenize` (its manifest.json): its shards in order,
//     each with its .mask.
//
// Splits, by position: train = the first (1 - data.text_holdout) of the token stream, the
// held-out tail is Splits::val (evaluated at epoch ends) and, the same Source, Splits::test
// (the final evaluation): a text corpus has no separate test set, and cutting a third piece
// would take text from training to measure the same thing twice.
// Sample i of a split is the window at token o = i * block_size of that split:
//   x = tokens[o : o+T],  y = tokens[o+1 : o+T+1]   (int64 [T] each, T = block_size)
// so a split of n tokens has (n - 1) / T samples, and the targets of train never reach
// into val. data.limit > 0 keeps only the first `limit` train windows.
// Tokens stay compact in memory (uint8 for bytes; int32 for .bin, as torch has few
// kernels for uint16) and get_batch gathers a batch's windows with one index_select.
//
//   auto splits = trainbox::data::load_text(cfg.data, cfg.model.block_size);
//   auto b = splits.train->get_batch(torch::arange(16));   // b.x, b.y: int64 [16, T]
//   double h = *trainbox::data::unigram_entropy(*splits.train);   // nats per token
//
// Every inconsistency is a DataError naming the file, the offset or count, what was
// expected and how to fix it. Sources are immutable after loading; get_batch may be
// called from any one thread at a time.
#pragma once
#include <cstdint>
#include <optional>

#include <torch/types.h>

#include <trainbox/data/config.h>
#include <trainbox/data/source.h>
#include <trainbox/data/token_file.h>  // kTokenFileMagic, the .bin layout

namespace trainbox::data {

// Train, val and test (= val) Sources of `block_size`-token windows from cfg.path;
// sample_shape {block_size}, classes = the vocabulary size.
Splits load_text(const DataConfig& cfg, std::int64_t block_size);

// Entropy, in nats per token, of the distribution of token ids in `tokens` (any integer
// tensor of ids in [0, vocab)): the loss of the best model that ignores context (the
// unigram baseline). 0 for an empty tensor.
double unigram_entropy(const torch::Tensor& tokens, std::int64_t vocab);
// The same for the tokens of a split that load_text made (its whole range, the last
// window's target included); nullopt for any other Source.
std::optional<double> unigram_entropy(const Source& split);

}  // namespace trainbox::data
