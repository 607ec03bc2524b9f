// Image folder listing (trainbox/data/image/folder.h): torchvision's order, what is skipped,
// the errors, and the seeded split. tests/integration/image_folder_vs_torchvision.py checks
// the order against torchvision itself.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <trainbox/data/image/folder.h>
#include <trainbox/util/errors.h>

namespace trainbox::data {
namespace {

std::vector<std::string> files(const ImageFolderListing& l) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < l.size(); ++i)
    out.push_back(std::to_string(l.label(i)) + ":" + std::string(l.relative_path(i)));
  return out;
}

TEST(ImageFolder, ClassesAndFilesInTorchvisionOrder) {
  test::TempDir d;
  // classes by code point: "10" < "9", "B" < "a" < "été"
  for (const char* f : {"a/x.jpg", "B/y.png", "10/z.jpeg", "9/w.JPG", "été/v.jpg",
                        // sorted(os.walk()) sorts folders as whole strings, not depth first: "a/s" is
                        // a prefix of "a/s t", but "a/s t" (' ' 0x20) and "a/s-u" ('-' 0x2d) come before
                        // "a/s/d" ('/' 0x2f)
                        "a/s/1.jpg", "a/s/d/4.jpg", "a/s-u/2.jpg", "a/s t/3.jpg", "a/b.jpg"})
    d.write(std::string("r/") + f, "");
  const ImageFolderListing l = list_image_folder(d / "r");
  EXPECT_EQ(l.classes, (std::vector<std::string>{"10", "9", "B", "a", "été"}));
  EXPECT_EQ(files(l),
            (std::vector<std::string>{"0:10/z.jpeg", "1:9/w.JPG", "2:B/y.png", "3:a/b.jpg", "3:a/x.jpg", "3:a/s/1.jpg",
                                      "3:a/s t/3.jpg", "3:a/s-u/2.jpg", "3:a/s/d/4.jpg", "4:été/v.jpg"}));
  EXPECT_EQ(l.class_counts, (std::vector<std::int64_t>{1, 1, 1, 6, 1}));
  EXPECT_EQ(l.path(0), d / "r/10/z.jpeg");
}

TEST(ImageFolder, HiddenAndOtherFilesAreSkippedAndCounted) {
  test::TempDir d;
  for (const char* f : {"cat/a.jpg", "cat/.DS_Store", "cat/._a.jpg", "cat/notes.txt", "cat/b.bmp", "top.jpg",
                        ".ipynb_checkpoints/x.jpg", "cat/.cache/c.jpg"})
    d.write(std::string("r/") + f, "");
  const ImageFolderListing l = list_image_folder(d / "r");
  EXPECT_EQ(l.classes, std::vector<std::string>{"cat"});
  EXPECT_EQ(files(l), std::vector<std::string>{"0:cat/a.jpg"});
  EXPECT_EQ(l.skipped_hidden, 4);  // .DS_Store, ._a.jpg, .ipynb_checkpoints/, .cache/
  EXPECT_EQ(l.skipped_other, 3);   // notes.txt, b.bmp, top.jpg (no class)
  EXPECT_EQ(l.skipped_examples.size(), kMaxSkippedExamples);
}

TEST(ImageFolder, LinksAreFollowedAndCyclesWalkedOnce) {
  test::TempDir d;
  d.write("other/x.jpg", "");
  d.write("r/cat/a.jpg", "");
  ASSERT_EQ(::symlink((d / "other").c_str(), (d / "r/dog").c_str()), 0);
  ASSERT_EQ(::symlink((d / "r/cat").c_str(), (d / "r/cat/loop").c_str()), 0);
  const ImageFolderListing l = list_image_folder(d / "r");
  EXPECT_EQ(files(l), (std::vector<std::string>{"0:cat/a.jpg", "1:dog/x.jpg"}));
}

TEST(ImageFolder, ErrorsAreDataErrorsNamingTheFolder) {
  test::TempDir d;
  auto message = [](const std::string& root) {
    try {
      list_image_folder(root);
    } catch (const DataError& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      EXPECT_FALSE(e.hint().empty());
      return std::string(e.what());
    }
    return std::string("no DataError");
  };
  EXPECT_NE(message(d / "missing").find("does not exist"), std::string::npos);
  d.write("file.jpg", "");
  EXPECT_NE(message(d / "file.jpg").find("is not a folder"), std::string::npos);
  d.write("flat/a.jpg", "");
  EXPECT_NE(message(d / "flat").find("has no class folders (1 images lie directly in it)"), std::string::npos);
  d.write("empty/cat/a.jpg", "");
  d.write("empty/dog/readme.txt", "");
  EXPECT_NE(message(d / "empty").find("1 class folder without a .jpg/.jpeg/.png image: 'dog'"), std::string::npos);
  if (::geteuid() != 0) {  // root reads anything
    d.write("locked/cat/sub/a.jpg", "");
    ::chmod((d / "locked/cat/sub").c_str(), 0);
    EXPECT_NE(message(d / "locked").find("cannot read image folder"), std::string::npos);
    ::chmod((d / "locked/cat/sub").c_str(), 0755);
  }
}

TEST(ImageFolder, FixesNameTheSettingAndTheParentOfAClassFolder) {
  test::TempDir d;
  auto hint = [](const std::string& root, std::string_view setting) {
    try {
      list_image_folder(root, setting);
    } catch (const DataError& e) {
      return e.hint();
    }
    return std::string("no DataError");
  };
  EXPECT_EQ(hint(d / "val", "data.val_path").rfind("set data.val_path to an existing image folder", 0), 0u);
  EXPECT_EQ(hint(d / "train", "data.path").rfind("set data.path to an existing image folder", 0), 0u);
  d.write("imgs/cat/a.jpg", "");
  // one level too deep: the images of one class, no class folders
  EXPECT_NE(hint(d / "imgs/cat", "").find("pass its parent " + (d / "imgs")), std::string::npos);
  EXPECT_NE(hint(d / "imgs/cat", "data.path").find("set data.path to its parent " + (d / "imgs")), std::string::npos);
}

TEST(ImageFolder, NotImagesAreFoundWithoutADecoder) {
  test::TempDir d;
  d.write("r/cat/ok.jpg", std::string("\xff\xd8\xff\xe0 rest of a JPEG"));
  d.write("r/cat/empty.jpg", "");
  d.write("r/dog/ok.png", std::string("\x89PNG\r\n\x1a\n rest of a PNG"));
  d.write("r/dog/page.jpg", "<html>404</html>");
  const ImageFolderListing l = list_image_folder(d / "r");
  const NotImages by_size = find_not_images(l, /*read_magic=*/false);  // what data ls does: a stat each
  EXPECT_EQ(by_size.empty, 1);
  EXPECT_EQ(by_size.unknown, 0);
  EXPECT_EQ(by_size.examples, std::vector<std::string>{"cat/empty.jpg (0 bytes)"});
  const NotImages by_bytes = find_not_images(l, /*read_magic=*/true);  // what data pack does
  EXPECT_EQ(by_bytes.count(), 2);
  EXPECT_EQ(by_bytes.text(),
            "2 files (1 of 0 bytes, 1 neither JPEG nor PNG): cat/empty.jpg (0 bytes), dog/page.jpg (not JPEG or PNG)");
}

TEST(ImageFolder, ImageExtensionsAnyCase) {
  EXPECT_TRUE(has_image_extension("a.JPEG"));
  EXPECT_TRUE(has_image_extension("a.Png"));
  EXPECT_TRUE(has_image_extension(".jpg"));
  EXPECT_FALSE(has_image_extension("a.jpg.txt"));
  EXPECT_FALSE(has_image_extension("jpg"));
  EXPECT_FALSE(has_image_extension("a.webp"));
}

TEST(ImageFolder, SplitIsSeededDisjointAndComplete) {
  auto [train, val] = split_indices(1000, 0.1, 7);
  EXPECT_EQ(val.size(), 100u);
  EXPECT_EQ(train.size(), 900u);
  std::set<std::int64_t> all(train.begin(), train.end());
  all.insert(val.begin(), val.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_TRUE(std::is_sorted(val.begin(), val.end()));
  EXPECT_EQ(split_indices(1000, 0.1, 7).second, val);
  EXPECT_NE(split_indices(1000, 0.1, 8).second, val);
  EXPECT_EQ(split_indices(2, 0.01, 1).second.size(), 1u);  // at least one each
  EXPECT_EQ(split_indices(2, 0.99, 1).first.size(), 1u);
  EXPECT_THROW(split_indices(10, 0.0, 1), UsageError);
  EXPECT_THROW(split_indices(10, 1.0, 1), UsageError);
  EXPECT_THROW(split_indices(1, 0.5, 1), UsageError);
  // the permutation is pinned: the same on every machine and standard library
  EXPECT_EQ(shuffled_indices(5, 0), shuffled_indices(5, 0));
  const auto p = shuffled_indices(5, 0);
  EXPECT_EQ(std::set<std::int64_t>(p.begin(), p.end()).size(), 5u);
}

}  // namespace
}  // namespace trainbox::data
