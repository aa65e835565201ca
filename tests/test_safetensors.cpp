// .safetensors: memory-mapped loading (views of the mapping, never written),
// fp8 as Kiln's fp8 dtypes, dtypes Kiln lacks, hostile headers, sharded checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/array_bytes.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

std::string temp_path(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("kiln_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return (d / name).string();
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file with the given JSON header (padded to 8 bytes) and data bytes.
std::string write_file(const std::string& name, std::string header, const std::vector<uint8_t>& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

bool same(const array& a, const array& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && array_equal(a, b, true).item<bool>();
}

}  // namespace

TEST(Safetensors, LoadsEveryDtypeAsViewsOfTheMappingThatAreNeverWritten) {
  std::unordered_map<std::string, array> arrays;
  for (Dtype t : {bool_, uint8, uint32, int8, int32, int64, float16, bfloat16, float32, float64}) {
    arrays.emplace(dtype_name(t), test::random_array({3, 5}, t, -50, 50));
  }
  std::string path = temp_path("all.safetensors");
  save_safetensors(path, arrays, {{"k", "v"}});
  std::vector<char> before = read_bytes(path);
  auto [loaded, meta] = load_safetensors(path);
  EXPECT_EQ(meta.at("k"), "v");
  for (auto& [k, a] : arrays) EXPECT_TRUE(same(loaded.at(k), a)) << k;
  // Views: every array's data lies in one region the size of the file.
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (auto& [k, a] : loaded) {
    auto p = reinterpret_cast<uintptr_t>(io::raw_bytes(a));
    lo = std::min(lo, p);
    hi = std::max(hi, p + a.nbytes());
  }
  EXPECT_LE(hi - lo, before.size());
  // Donation: the graph holds the only reference to each input.
  array f = loaded.at("float32");
  loaded.clear();
  array y = f + 1.0f;
  f = array(0.0f);
  eval({y});
  EXPECT_EQ(read_bytes(path), before);
}

TEST(Safetensors, LargeFilesAreNotCopied) {
  const int n = 1 << 20;
  std::string path = temp_path("big.safetensors");
  save_safetensors(path, {{"w", test::random_array({n})}});
  eval({});
  size_t active = get_active_memory();
  reset_peak_memory();
  array w = load_safetensors(path).first.at("w");
  w.eval();
  EXPECT_LT(get_peak_memory(), active + n);
  EXPECT_EQ(w.size(), static_cast<size_t>(n));
}

TEST(Safetensors, Fp8LoadsAsTheFp8DtypesAndSavesBackAndMissingDtypesAreErrors) {
  std::string path = write_file("fp8.safetensors",
                                R"({"a":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[4,5]}})",
                                {0x38, 0x40, 0xb8, 0x7e, 0x3c});
  auto arrays = load_safetensors(path).first;
  EXPECT_EQ(arrays.at("a").dtype(), float8_e4m3fn);
  EXPECT_EQ(arrays.at("b").dtype(), float8_e5m2);
  EXPECT_TRUE(same(view(arrays.at("a"), uint8), array({uint8_t{0x38}, uint8_t{0x40}, uint8_t{0xb8}, uint8_t{0x7e}}, {2, 2})));
  EXPECT_TRUE(same(view(arrays.at("b"), uint8), array({uint8_t{0x3c}}, {1})));
  // 1, 2, -1, 448 and 1.
  EXPECT_TRUE(same(astype(arrays.at("a"), float32), array({1.0f, 2.0f, -1.0f, 448.0f}, {2, 2})));
  EXPECT_EQ(astype(arrays.at("b"), float32).item<float>(), 1.0f);
  // Saved back with the same dtype names and bytes.
  std::string again = temp_path("fp8_again.safetensors");
  save_safetensors(again, arrays);
  auto back = load_safetensors(again).first;
  for (const char* k : {"a", "b"}) {
    EXPECT_EQ(back.at(k).dtype(), arrays.at(k).dtype()) << k;
    EXPECT_TRUE(same(view(back.at(k), uint8), view(arrays.at(k), uint8))) << k;
  }
  std::vector<char> bytes = read_bytes(again);
  std::string text(bytes.begin(), bytes.end());
  EXPECT_NE(text.find("F8_E4M3"), std::string::npos);
  EXPECT_NE(text.find("F8_E5M2"), std::string::npos);
  // I16, U16, U64 and C64 load since Kiln has those dtypes (test_npy.cpp's
  // and test_complex.cpp's round trips).
  for (const char* t : {"F4", "C128"}) {
    std::string bad = write_file("bad.safetensors",
                                 std::string(R"({"a":{"dtype":")") + t + R"(","shape":[1],"data_offsets":[0,2]}})",
                                 {0, 0});
    EXPECT_TRUE(test::throws_error([&] { load_safetensors(bad); }, {"[load_safetensors]", bad, t, "no dtype"}));
  }
}

TEST(Safetensors, HostileHeadersAreErrors) {
  auto rejects = [](const std::string& header, const std::vector<uint8_t>& data, const std::string& why) {
    std::string path = write_file("hostile.safetensors", header, data);
    return test::throws_error([&] { load_safetensors(path); }, {"[load_safetensors]", path, why});
  };
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[4294967296],"data_offsets":[0,4]}})", {0, 0, 0, 0}, "dimension"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[65536,65536,65536],"data_offsets":[0,4]}})", {0, 0, 0, 0},
                      "larger than the file"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", {0, 0, 0, 0}, "data_offsets"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,0]}})", {0, 0, 0, 0},
                      "data_offsets"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {1, 7}, "neither 0 nor 1"));
  // Numbers that are not integers (a float too large for int64: the
  // fuzzer's find of session 25) and negative offsets.
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"BOOL","shape":[23333333333333333333333333333333333333],"data_offsets":[0,2]}})",
                      {0, 0}, "not an integer"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"BOOL","shape":[2.5],"data_offsets":[0,2]}})", {0, 0}, "not an integer"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2.0]}})", {0, 0}, "not byte offsets"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[-1,1]}})", {0, 0}, "not byte offsets"));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":"x","data_offsets":[0,4]}})", {0, 0, 0, 0}, "malformed"));
  EXPECT_TRUE(rejects(R"({"a":[1,2]})", {}, "malformed"));
  EXPECT_TRUE(rejects(R"([1,2])", {}, "not a JSON object"));
  EXPECT_TRUE(rejects(R"({"a":)", {}, "not JSON"));
  EXPECT_TRUE(rejects(R"({"__metadata__":{"k":1}})", {}, "not a string"));
  EXPECT_TRUE(test::throws_error([] { load_safetensors(temp_path("missing.safetensors")); },
                                 {"[load_safetensors]", "cannot open"}));
}

TEST(Safetensors, UnalignedTensorsAreCopiedNotMisread) {
  // Tensors at odd offsets (the format allows them): loaded as copies.
  std::vector<uint8_t> data(9);
  float v = 3.25f;
  std::memcpy(data.data() + 1, &v, 4);
  std::string path = write_file("odd.safetensors",
                                R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("x":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
                                data);
  EXPECT_EQ(load_safetensors(path).first.at("x").item<float>(), 3.25f);
}

TEST(Safetensors, ShardedCheckpointsLoadThroughTheIndex) {
  auto dir = std::filesystem::path(temp_path("sharded"));
  std::filesystem::remove_all(dir);  // a folder left by an earlier process of the same pid
  std::filesystem::create_directories(dir);
  array a = test::random_array({2, 3}), b = test::random_array({4}, bfloat16), c = test::random_array({1}, int32);
  save_safetensors((dir / "model-00001-of-00002.safetensors").string(), {{"a", a}, {"b", b}}, {{"format", "pt"}});
  save_safetensors((dir / "model-00002-of-00002.safetensors").string(), {{"c", c}});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata":{"total_size":42},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      << R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})";
  for (const std::string& p : {dir.string(), (dir / "model.safetensors.index.json").string()}) {
    auto [arrays, meta] = load_safetensors_sharded(p);
    ASSERT_EQ(arrays.size(), 3u) << p;
    EXPECT_TRUE(same(arrays.at("a"), a));
    EXPECT_TRUE(same(arrays.at("b"), b));
    EXPECT_TRUE(same(arrays.at("c"), c));
    EXPECT_EQ(meta.at("format"), "pt");
  }
  // An index naming a tensor its shard lacks.
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})";
  EXPECT_TRUE(test::throws_error([&] { load_safetensors_sharded(dir.string()); }, {"[load_safetensors_sharded]", "a", "not in"}));
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weights":{}})";
  EXPECT_TRUE(test::throws_error([&] { load_safetensors_sharded(dir.string()); }, {"weight_map"}));
  // Without an index: every .safetensors of the directory.
  std::filesystem::remove(dir / "model.safetensors.index.json");
  EXPECT_EQ(load_safetensors_sharded(dir.string()).first.size(), 3u);
  // The same name in two shards.
  save_safetensors((dir / "model-00003.safetensors").string(), {{"c", c}});
  EXPECT_TRUE(test::throws_error([&] { load_safetensors_sharded(dir.string()); }, {"c", "more than one shard"}));
  EXPECT_TRUE(test::throws_error([&] { load_safetensors_sharded((dir / "nothing").string()); }, {"does not exist"}));
}
