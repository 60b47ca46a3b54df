// Small input files (config.json, tokenizer.json, states, profiles) are read whole only when
// they are regular files under a size limit: a FIFO does not block, a device does not fill
// memory, a directory is named as one. Names from a corrupt file print escaped.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/printable.h"
#include "io/input_file.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

using testing::ErrorOf;

TEST(InputFile, ReadsARegularFileWhole) {
  testing::TempDir dir;
  std::ofstream(dir / "a.json") << "{\"x\": 1}";
  EXPECT_EQ(ReadInputFile(dir / "a.json", 100), "{\"x\": 1}");
  EXPECT_TRUE(RegularFileExists(dir / "a.json"));
  EXPECT_FALSE(RegularFileExists(dir / "missing.json"));
  EXPECT_EQ(DescribePath(dir / "missing.json"), "");
  EXPECT_EQ(ReadInputFile(dir / "a.json", 8).size(), 8u) << "exactly the limit is allowed";
}

TEST(InputFile, WhatIsNotAFileIsNamed) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "d.json");
  ASSERT_EQ(::mkfifo((dir / "f.json").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/zero", dir / "z.json");
  // Each ends at once: the FIFO has no writer and /dev/zero has no end.
  EXPECT_NE(ErrorOf([&] { ReadInputFile(dir / "d.json", 1 << 20); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadInputFile(dir / "f.json", 1 << 20); }).find("is a FIFO, not a file"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadInputFile(dir / "z.json", 1 << 20); })
                .find("z.json is a character device, not a file"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { RegularFileExists(dir / "d.json"); }).find("d.json is a directory"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { RegularFileExists(dir / "f.json"); }).find("a FIFO"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadInputFile(dir / "missing", 10); }).find("cannot open"),
            std::string::npos);
}

TEST(InputFile, ALargerFileIsRefusedWithItsSize) {
  testing::TempDir dir;
  std::ofstream(dir / "big.json") << std::string(3 << 20, ' ');
  const std::string error = ErrorOf([&] { ReadInputFile(dir / "big.json", 1 << 20); });
  EXPECT_NE(error.find("big.json is 3 MiB, more than the 1 MiB"), std::string::npos) << error;
}

TEST(Printable, EscapesControlBytesAndBrokenUtf8) {
  EXPECT_TRUE(IsPrintableText("llama.context_length"));
  EXPECT_TRUE(IsPrintableText("tokenizer.ggml.tokens \xc3\xa9"));  // é
  EXPECT_FALSE(IsPrintableText(std::string("a\0b", 3)));
  EXPECT_FALSE(IsPrintableText("a\x1b[31mb"));  // An ANSI escape.
  EXPECT_FALSE(IsPrintableText("\xc3"));        // A cut sequence.
  EXPECT_FALSE(IsPrintableText("\xc0\xaf"));    // Overlong '/'.
  EXPECT_FALSE(IsPrintableText("\xed\xa0\x80"));  // A surrogate.
  EXPECT_FALSE(IsPrintableText("\xc2\x9b"));      // C1 control (CSI).
  EXPECT_EQ(Printable(std::string("a\0b\x1b", 4)), "a\\x00b\\x1b");
  EXPECT_EQ(Printable("\xff\xc3\xa9"), "\\xff\xc3\xa9");
  EXPECT_EQ(Printable(std::string(300, 'k'), 10), std::string(10, 'k') + "...");
}

}  // namespace
}  // namespace moex
