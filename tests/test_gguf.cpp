// GGUF: the kiln::gguf reader and writer (round trips of every metadata and
// tensor type, zero-copy views of the mapping, malformed files) and MLX's
// load_gguf / save_gguf. Interop with gguf-py is in test_gguf_interop.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/array_bytes.h"
#include "kiln/gguf.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
namespace g = kiln::gguf;

namespace {

std::string temp_path(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("kiln_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return (d / name).string();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bool same(const array& a, const array& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && array_equal(a, b, true).item<bool>();
}

// One value of every type, arrays of every element type (an empty one too)
// and nested arrays.
std::vector<std::pair<std::string, g::Value>> every_value() {
  return {
      {"general.architecture", "llama"},
      {"u8", uint8_t{200}},
      {"i8", int8_t{-100}},
      {"u16", uint16_t{60000}},
      {"i16", int16_t{-30000}},
      {"u32", uint32_t{4000000000u}},
      {"i32", int32_t{-2000000000}},
      {"f32", 1.5f},
      {"bool", true},
      {"str", "h\xc3\xa9llo"},
      {"u64", uint64_t{(1ull << 63) + 5}},
      {"i64", int64_t{-(1ll << 62)}},
      {"f64", 0.1},
      {"a.u8", std::vector<uint8_t>{1, 2, 255}},
      {"a.i8", std::vector<int8_t>{-1, 2}},
      {"a.u16", std::vector<uint16_t>{65535, 0}},
      {"a.i16", std::vector<int16_t>{-32768, 7}},
      {"a.u32", std::vector<uint32_t>{7, 8, 9}},
      {"a.i32", std::vector<int32_t>{-7}},
      {"a.f32", std::vector<float>{0.25f, -3.f}},
      {"a.bool", std::vector<bool>{true, false, true}},
      {"a.str", std::vector<std::string>{"a", "bc", ""}},
      {"a.u64", std::vector<uint64_t>{1ull << 40}},
      {"a.i64", std::vector<int64_t>{-1, 1ll << 50}},
      {"a.f64", std::vector<double>{1e300, -2.5}},
      {"a.empty", std::vector<float>{}},
      {"a.nested", std::vector<g::Value>{std::vector<int32_t>{1, 2}, std::vector<std::string>{"x"},
                                         std::vector<g::Value>{std::vector<uint8_t>{3}}}},
  };
}

}  // namespace

TEST(Gguf, MetadataOfEveryTypeRoundTrips) {
  g::Writer w;
  for (auto& [k, v] : every_value()) w.add(k, v);
  w.add("general.alignment", uint32_t{64});
  std::string path = temp_path("meta.gguf");
  w.write(path);
  g::File f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  auto want = every_value();
  ASSERT_EQ(f.metadata().size(), want.size() + 1);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, want[i].first);
    EXPECT_TRUE(f.metadata()[i].second == want[i].second) << want[i].first;
  }
  EXPECT_EQ(f.get<std::string>("general.architecture"), "llama");
  EXPECT_EQ(f.at("u16").type(), g::ValueType::uint16);
  EXPECT_EQ(f.at("a.bool").element_type(), g::ValueType::bool_);
  EXPECT_EQ(f.at("a.nested").element_type(), g::ValueType::array);
  EXPECT_EQ(f.at("a.str").size(), 3u);
  EXPECT_EQ(f.at("a.empty").size(), 0u);
  EXPECT_EQ(f.at("u32").to_int(), 4000000000ll);
  EXPECT_DOUBLE_EQ(f.at("i8").to_double(), -100.0);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_TRUE(test::throws_error([&] { f.at("missing"); }, {"[gguf]", path, "missing"}));
  EXPECT_TRUE(test::throws_error([&] { f.get<int32_t>("u32"); }, {"uint32", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { f.at("u64").to_int(); }, {"int64"}));
  EXPECT_TRUE(test::throws_error([&] { f.at("str").to_double(); }, {"not a number"}));
  EXPECT_TRUE(test::throws_error([&] { f.at("u8").size(); }, {"not an array"}));
}

TEST(Gguf, TensorsOfEveryTypeRoundTripAsViewsOfTheMapping) {
  g::Writer w;
  w.add("general.architecture", "test");
  std::vector<std::pair<std::string, array>> plain = {
      {"f32", test::random_array({3, 5}, float32)},
      {"f16", test::random_array({7}, float16)},
      {"bf16", test::random_array({2, 3, 5}, bfloat16)},
      {"f64", test::random_array({2, 1, 3, 2}, float64)},
      {"i8", test::random_array({9}, int8, -100, 100)},
      {"i32", transpose(test::random_array({4, 3}, int32, -1e6, 1e6))},  // non-contiguous
      {"i64", test::random_array({1}, int64, -1e12, 1e12)},
      {"scalar", array(2.5f)},
      {"empty", zeros({0, 3}, float32)},
  };
  for (auto& [n, a] : plain) w.add_tensor(n, a);
  const char* modes[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
  std::vector<array> blocks;
  for (const char* m : modes) {
    blocks.push_back(quantize(test::random_array({3, 512}), std::nullopt, std::nullopt, m)[0]);
    w.add_tensor(m, blocks.back(), m);
  }
  std::string path = temp_path("tensors.gguf");
  w.write(path);

  std::vector<std::pair<std::string, array>> loaded;
  const uint8_t* map_begin;
  const uint8_t* map_end;
  {
    g::File f(path);
    map_begin = static_cast<const uint8_t*>(f.mapping());
    map_end = map_begin + f.mapping_size();
    ASSERT_EQ(f.tensors().size(), plain.size() + 10);
    for (const auto& info : f.tensors()) {
      EXPECT_EQ(info.offset % f.alignment(), 0u) << info.name;
      loaded.emplace_back(info.name, f.tensor(info));
    }
    const g::TensorInfo* q = f.find_tensor("q4_k");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, g::TensorType::q4_k);
    EXPECT_EQ(q->shape, (Shape{3, 512}));
    EXPECT_EQ(q->nbytes, 3u * 2 * 144);
    EXPECT_EQ(g::block_mode(q->type), "q4_k");
    EXPECT_EQ(g::tensor_type_name(f.find_tensor("bf16")->type), "BF16");
    EXPECT_EQ(f.find_tensor("i32")->shape, (Shape{3, 4}));
  }
  // The File is gone: the arrays keep the mapping alive.
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(loaded[i].first, plain[i].first);
    EXPECT_TRUE(same(loaded[i].second, plain[i].second)) << plain[i].first;
  }
  for (size_t i = 0; i < 10; ++i) {
    const array& a = loaded[plain.size() + i].second;
    EXPECT_TRUE(same(a, blocks[i])) << modes[i];
    EXPECT_TRUE(same(dequantize(a, array({}), std::nullopt, std::nullopt, std::nullopt, modes[i]),
                      dequantize(blocks[i], array({}), std::nullopt, std::nullopt, std::nullopt, modes[i])));
  }
  for (auto& [n, a] : loaded) {
    if (a.size() == 0) continue;
    const auto* p = static_cast<const uint8_t*>(io::raw_bytes(a));
    EXPECT_TRUE(p >= map_begin && p + a.nbytes() <= map_end) << n << " is a copy, not a view";
  }
}

TEST(Gguf, MappedTensorsAreNeverWrittenOrCopied) {
  const int n = 1 << 20;
  std::string path = temp_path("big.gguf");
  {
    g::Writer w;
    w.add_tensor("x", test::random_array({n}, float32));
    w.write(path);
  }
  std::vector<uint8_t> before = read_bytes(path);
  eval({});
  size_t active = get_active_memory();
  reset_peak_memory();
  array x = g::File(path).tensor("x");
  x.eval();
  EXPECT_LT(get_peak_memory(), active + n);  // 4n bytes were not copied
  // Once x is dropped the graph holds the only reference: an op that
  // donated it would write the read-only mapping (and crash); the result
  // must land elsewhere.
  array y = x * 2.0f;
  x = array(0.0f);
  eval({y});
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(y.size(), static_cast<size_t>(n));
}

TEST(Gguf, WriterChecksItsInputs) {
  g::Writer w;
  w.add("k", 1);
  EXPECT_TRUE(test::throws_error([&] { w.add("k", 2); }, {"duplicate", "k"}));
  EXPECT_TRUE(test::throws_error([&] { w.add("general.alignment", 32); }, {"uint32"}));
  EXPECT_TRUE(test::throws_error([&] { w.add("general.alignment", uint32_t{48}); }, {"power of two"}));
  EXPECT_TRUE(test::throws_error([&] { w.add("n", std::vector<g::Value>{1}); }, {"array of arrays", "int32"}));
  w.add_tensor("t", zeros({2}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("t", zeros({2})); }, {"duplicate", "t"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("b", zeros({2}, bool_)); }, {"bool"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("u", zeros({2}, uint32)); }, {"uint32"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("q", zeros({2, 19}, uint8), "q4_0"); }, {"q4_0", "18"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("q", zeros({2, 18}), "q4_0"); }, {"uint8"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("q", zeros({2, 18}, uint8), "q9"); }, {"q9"}));
  EXPECT_TRUE(test::throws_error([&] { w.add_tensor("d", zeros({1, 1, 1, 1, 1})); }, {"5 dims"}));
}

namespace {

// A small valid file and the positions of its fields, for corrupting.
struct Sample {
  std::vector<uint8_t> bytes;
  std::string path;
};

Sample sample() {
  g::Writer w;
  w.add("general.architecture", "llama");
  w.add("a", std::vector<std::string>{"x", "yz"});
  w.add("n", std::vector<g::Value>{std::vector<int32_t>{1, 2}});
  w.add_tensor("w", test::random_array({2, 8}));
  w.add_tensor("q", quantize(test::random_array({1, 32}), std::nullopt, std::nullopt, "q8_0")[0], "q8_0");
  Sample s;
  s.path = temp_path("sample.gguf");
  w.write(s.path);
  s.bytes = read_bytes(s.path);
  return s;
}

::testing::AssertionResult rejects(const std::vector<uint8_t>& bytes, const std::vector<std::string>& fragments) {
  std::string path = temp_path("bad.gguf");
  write_bytes(path, bytes);
  std::vector<std::string> f = fragments;
  f.push_back(path);
  auto r = test::throws_error([&] { g::File file(path); }, f);
  if (!r) return r;
  f.back() = "[load_gguf]";
  return test::throws_error([&] { load_gguf(path); }, f);
}

template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

size_t find(const std::vector<uint8_t>& b, const std::string& s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  EXPECT_NE(it, b.end()) << s;
  return static_cast<size_t>(it - b.begin());
}

}  // namespace

TEST(Gguf, MalformedFilesAreErrorsNamingTheFile) {
  Sample s = sample();
  ASSERT_NO_THROW(g::File{s.path});
  // Every truncation of the header and infos, and of the data.
  size_t data_offset = g::File(s.path).data_offset();
  // The last tensor (q8_0, 34 bytes) starts 64 bytes into the data.
  for (size_t n = 0; n < data_offset + 64 + 34; n += (n < data_offset ? 1 : 7)) {
    std::vector<uint8_t> b(s.bytes.begin(), s.bytes.begin() + static_cast<long>(n));
    EXPECT_TRUE(rejects(b, {})) << "truncated to " << n;
  }
  auto b = s.bytes;
  b[0] = 'X';
  EXPECT_TRUE(rejects(b, {"magic"}));
  b = s.bytes;
  put<uint32_t>(b, 4, 1);
  EXPECT_TRUE(rejects(b, {"version 1"}));
  put<uint32_t>(b, 4, 0x03000000u);
  EXPECT_TRUE(rejects(b, {"big-endian"}));
  b = s.bytes;
  put<uint64_t>(b, 8, 1ull << 60);
  EXPECT_TRUE(rejects(b, {"tensors cannot fit"}));
  b = s.bytes;
  put<uint64_t>(b, 16, ~0ull);
  EXPECT_TRUE(rejects(b, {"metadata entries cannot fit"}));
  // The first key's length.
  b = s.bytes;
  put<uint64_t>(b, 24, 1ull << 62);
  EXPECT_TRUE(rejects(b, {"length"}));
  // The string array's count, and the nested array's element type.
  size_t a_at = find(s.bytes, std::string("\x01\0\0\0\0\0\0\0a", 9)) + 9;
  b = s.bytes;
  put<uint64_t>(b, a_at + 8, 1ull << 61);
  EXPECT_TRUE(rejects(b, {"array of", "string"}));
  b = s.bytes;
  put<uint32_t>(b, a_at, 99);
  EXPECT_TRUE(rejects(b, {"unknown value type 99"}));
  b = s.bytes;
  put<uint32_t>(b, a_at + 4, 13);
  EXPECT_TRUE(rejects(b, {"unknown array element type 13"}));
  // Tensor "w": its dims, type and offset follow its name.
  size_t w_at = find(s.bytes, std::string("\x01\0\0\0\0\0\0\0w", 9)) + 9;
  b = s.bytes;
  put<uint32_t>(b, w_at, 5);
  EXPECT_TRUE(rejects(b, {"5 dims"}));
  b = s.bytes;
  put<uint64_t>(b, w_at + 4, 1ull << 40);
  EXPECT_TRUE(rejects(b, {"too large"}));
  b = s.bytes;
  put<uint64_t>(b, w_at + 4, 1ull << 30);
  put<uint64_t>(b, w_at + 12, 1ull << 30);
  EXPECT_TRUE(rejects(b, {"runs past the end"}));
  b = s.bytes;
  put<uint32_t>(b, w_at + 20, 4);
  EXPECT_TRUE(rejects(b, {"unknown ggml type 4"}));
  b = s.bytes;
  put<uint32_t>(b, w_at + 20, 2);  // Q4_0 rows of 8: not whole blocks
  EXPECT_TRUE(rejects(b, {"multiple of its block"}));
  b = s.bytes;
  put<uint64_t>(b, w_at + 24, 8);
  EXPECT_TRUE(rejects(b, {"not a multiple of the alignment"}));
  b = s.bytes;
  put<uint64_t>(b, w_at + 24, ~0ull - 31);
  EXPECT_TRUE(rejects(b, {"runs past the end"}));
  // A duplicate tensor name.
  b = s.bytes;
  b[find(s.bytes, std::string("\x01\0\0\0\0\0\0\0q", 9)) + 8] = 'w';
  EXPECT_TRUE(rejects(b, {"duplicate tensor name w"}));
  EXPECT_TRUE(test::throws_error([] { g::File f(temp_path("missing.gguf")); }, {"[gguf]", "cannot open"}));
}

TEST(Gguf, DeeplyNestedArraysAreRejected) {
  // general.alignment = 32, then a key whose value nests 100 arrays deep.
  std::vector<uint8_t> b;
  auto u32 = [&](uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
  auto u64 = [&](uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); };
  u32(0x46554747), u32(3), u64(0), u64(1);
  u64(1), b.push_back('k'), u32(9);
  for (int i = 0; i < 100; ++i) u32(9), u64(1);
  u32(0), u64(0);
  EXPECT_TRUE(rejects(b, {"nested deeper"}));
}

TEST(Gguf, I16LoadsAsInt16) {
  Sample s = sample();
  auto b = s.bytes;
  size_t w_at = find(s.bytes, std::string("\x01\0\0\0\0\0\0\0w", 9)) + 9;
  put<uint32_t>(b, w_at + 20, 25);  // I16: 2 bytes each, the file still holds them
  std::string path = temp_path("i16.gguf");
  write_bytes(path, b);
  g::File f(path);
  EXPECT_EQ(f.find_tensor("w")->type, g::TensorType::i16);
  EXPECT_EQ(f.find_tensor("w")->nbytes, 32u);
  array w = f.tensor("w");
  EXPECT_EQ(w.dtype(), int16);
  EXPECT_EQ(w.nbytes(), 32u);
  EXPECT_TRUE(test::throws_error([&] { f.tensor("nope"); }, {"no tensor nope"}));
}

TEST(Gguf, LoadAndSaveFollowMlx) {
  std::unordered_map<std::string, GGUFMetaData> meta = {
      {"general.architecture", std::string("llama")},
      {"names", std::vector<std::string>{"a", "b"}},
      {"count", array(uint32_t{7})},
      {"ratio", array(0.5f)},
      {"flag", array(true)},
      {"ids", array({1, 2, 3}, int32)},
      {"big", array({int64_t{1} << 40}, int64)},
      {"bytes", array({uint8_t{1}, uint8_t{250}}, uint8)},
      {"mask", array(std::vector<bool>{true, false}, {2})},
      {"d", array(0.25, float64)},
  };
  std::unordered_map<std::string, array> arrays = {
      {"a", test::random_array({4, 6})},         {"h", test::random_array({3}, float16)},
      {"b", test::random_array({2, 2}, bfloat16)}, {"i", test::random_array({5}, int8, -9, 9)},
      {"j", test::random_array({2, 3}, int32)},  {"k", test::random_array({2}, int64)},
  };
  std::string path = temp_path("mlx");
  save_gguf(path, arrays, meta);
  auto [got, got_meta] = load_gguf(path + ".gguf");
  ASSERT_EQ(got.size(), arrays.size());
  for (auto& [k, a] : arrays) EXPECT_TRUE(same(got.at(k), a)) << k;
  EXPECT_EQ(std::get<std::string>(got_meta.at("general.architecture")), "llama");
  EXPECT_EQ(std::get<std::vector<std::string>>(got_meta.at("names")), (std::vector<std::string>{"a", "b"}));
  for (const char* k : {"count", "ratio", "flag", "ids", "big", "bytes", "mask"}) {
    EXPECT_TRUE(same(std::get<array>(got_meta.at(k)), std::get<array>(meta.at(k)))) << k;
  }
  EXPECT_TRUE(same(std::get<array>(got_meta.at("d")), array(0.25f)));  // float64 -> float32, as MLX
  // Keys are written sorted: the file is the same however the maps hash.
  save_gguf(temp_path("mlx2.gguf"), arrays, meta);
  EXPECT_EQ(read_bytes(path + ".gguf"), read_bytes(temp_path("mlx2.gguf")));

  EXPECT_TRUE(test::throws_error([&] { save_gguf(path, {{"u", zeros({2}, uint32)}}); }, {"[save_gguf]", "uint32"}));
  EXPECT_TRUE(test::throws_error([&] { save_gguf(path, {}, {{"m", zeros({2, 2})}}); }, {"[save_gguf]", "dims"}));
  EXPECT_TRUE(test::throws_error([&] { save_gguf(path, {}, {{"m", zeros({0})}}); }, {"[save_gguf]", "empty"}));
  EXPECT_TRUE(test::throws_error([&] { save_gguf(path, {}, {{"m", zeros({2}, float16)}}); }, {"float16"}));
  EXPECT_TRUE(test::throws_error([&] { save_gguf(path, {}, {{"m", GGUFMetaData{}}}); }, {"no value"}));
}

TEST(Gguf, LoadGgufGivesQ4Q8AsAffineAndOtherBlocksAsFloat16) {
  g::Writer w;
  w.add("u16", uint16_t{9});
  w.add("i16s", std::vector<int16_t>{-3, 4});
  w.add("u64", uint64_t{12});
  w.add("nested", std::vector<g::Value>{std::vector<int32_t>{1}});
  std::map<std::string, array> blocks;
  for (const char* m : {"q4_0", "q4_1", "q8_0", "q5_0", "q6_k"}) {
    blocks.emplace(m, quantize(test::random_array({3, 256}), std::nullopt, std::nullopt, m)[0]);
    w.add_tensor(std::string("blk.") + m + ".weight", blocks.at(m), m);
  }
  std::string path = temp_path("quant.gguf");
  w.write(path);
  EXPECT_TRUE(test::throws_error([&] { load_gguf(path); }, {"[load_gguf]", "nested", "array of arrays"}));

  g::Writer w2;
  w2.add("u16", uint16_t{9});
  w2.add("i16s", std::vector<int16_t>{-3, 4});
  w2.add("u64", uint64_t{12});
  w2.add("big", uint64_t{~0ull});
  for (auto& [m, a] : blocks) w2.add_tensor(std::string("blk.") + m + ".weight", a, m);
  w2.write(path);
  EXPECT_TRUE(test::throws_error([&] { load_gguf(path); }, {"big", "int64"}));

  g::Writer w3;
  w3.add("u16", uint16_t{9});
  w3.add("i16s", std::vector<int16_t>{-3, 4});
  w3.add("u64", uint64_t{12});
  for (auto& [m, a] : blocks) w3.add_tensor(std::string("blk.") + m + ".weight", a, m);
  w3.write(path);
  auto [arrays, meta] = load_gguf(path);
  EXPECT_TRUE(same(std::get<array>(meta.at("u16")), array(uint32_t{9})));
  EXPECT_TRUE(same(std::get<array>(meta.at("i16s")), array({-3, 4}, int32)));
  EXPECT_TRUE(same(std::get<array>(meta.at("u64")), array(int64_t{12})));
  for (const char* m : {"q4_0", "q4_1", "q8_0"}) {
    std::string p = std::string("blk.") + m;
    const array& wq = arrays.at(p + ".weight");
    int bits = std::string(m) == "q8_0" ? 8 : 4;
    EXPECT_EQ(wq.dtype(), uint32);
    EXPECT_EQ(wq.shape(), (Shape{3, 256 * bits / 32}));
    EXPECT_EQ(arrays.at(p + ".scales").shape(), (Shape{3, 8}));
    EXPECT_EQ(arrays.at(p + ".biases").dtype(), float16);
    array affine = dequantize(wq, arrays.at(p + ".scales"), arrays.at(p + ".biases"), 32, bits);
    array block = dequantize(blocks.at(m), array({}), std::nullopt, std::nullopt, std::nullopt, m, std::nullopt, float16);
    // (q - 8) * d against q * d + (-8 d): float16 roundings may differ by an ulp.
    EXPECT_TRUE(test::all_close(affine, test::to_double(block), 2e-3, 1e-3)) << m;
    // The affine form drives quantized_matmul like MLX's.
    array x = test::random_array({2, 256});
    EXPECT_TRUE(test::all_close(quantized_matmul(x, wq, arrays.at(p + ".scales"), arrays.at(p + ".biases"), true, 32, bits),
                                test::to_double(matmul(x, transpose(astype(affine, float32)))), 2e-3, 2e-2))
        << m;
  }
  for (const char* m : {"q5_0", "q6_k"}) {
    const array& a = arrays.at(std::string("blk.") + m + ".weight");
    EXPECT_EQ(a.dtype(), float16);
    EXPECT_TRUE(same(a, dequantize(blocks.at(m), array({}), std::nullopt, std::nullopt, std::nullopt, m, std::nullopt,
                                    float16)));
  }
}
