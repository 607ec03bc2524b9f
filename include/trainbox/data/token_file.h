// trainbox/data/token_file.h — the constants of the nanoGPT / llm.c `.bin` token file that the
// text dataset reads (its layout table: trainbox/data/text.h). No torch: the torch-free
// parser (src/data/formats.cpp) and tools that write such files need nothing else.
//
//   std::string h(trainbox::data::kTokenFileHeaderBytes, '\0');   // then magic, version, N
#pragma once
#include <cstdint>

namespace trainbox::data {

// llm.c's token file: 256 int32 header words, then uint16 token ids (GPT-2's layout) …
inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
// … or uint32 token ids (llm.c's Llama 3 layout: its own magic and version 7), for a vocabulary
// over 65,536 ids (Llama 3's 128,256; Qwen2's 151,936). `trainbox data tokenize` writes the narrow
// layout when every id fits in 16 bits, else this one; an id is never truncated.
inline constexpr std::int32_t kTokenFileMagicWide = 20240801;
inline constexpr std::int32_t kTokenFileVersionWide = 7;
inline constexpr std::int64_t kTokenFileHeaderBytes = 256 * 4;
// trainbox's sidecar NAME.mask beside NAME.bin (docs/text-data.md): the same 1024-byte header
// (this magic, version 1, the token count), then one byte per token: bit 0 set = the loss counts
// this token as a target (0 = HF's label -100: a prompt, a user turn), bit 1 set = the token
// starts a document. A .bin without a .mask is all targets, one stream.
inline constexpr std::int32_t kMaskFileMagic = 20261207;
inline constexpr std::int32_t kMaskFileVersion = 1;
inline constexpr std::uint8_t kMaskTarget = 1, kMaskDocStart = 2;
// The label of a token the loss skips (torch's cross_entropy ignore_index, HF's -100).
inline constexpr std::int64_t kIgnoreIndex = -100;
static_assert(kTokenFileHeaderBytes == 1024, "llm.c's header is 256 int32 words");

}  // namespace trainbox::data
