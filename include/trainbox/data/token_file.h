// trainbox/data/token_file.h — the constants of the nanoGPT / llm.c `.bin` token file that the
// text dataset reads (its layout table: trainbox/data/text.h). No torch: the torch-free
// parser (src/data/formats.cpp) and tools that write such files need nothing else.
//
//   std::string h(trainbox::data::kTokenFileHeaderBytes, '\0');   // then magic, version, N
#pragma once
#include <cstdint>

namespace trainbox::data {

// llm.c's token file: 256 int32 header words, then uint16 token ids.
inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
inline constexpr std::int64_t kTokenFileHeaderBytes = 256 * 4;
static_assert(kTokenFileHeaderBytes == 1024, "llm.c's header is 256 int32 words");

}  // namespace trainbox::data
