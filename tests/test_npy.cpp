// .npy / .npz: round trips for every dtype and layout, malformed files, and
// interchange with numpy itself (skipped where python3 has no numpy).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("kiln_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

bool have_numpy() { return std::system("python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

int run_python(const std::string& script) {
  std::string path = temp_dir() + "/script.py";
  std::ofstream(path) << script;
  return std::system(("python3 " + path).c_str());
}

void expect_equal_arrays(const array& a, const array& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_TRUE(array_equal(a, b, /*equal_nan=*/true).item<bool>());
}

}  // namespace

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  std::string dir = temp_dir();
  for (Dtype t : {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32,
                  float64}) {
    for (Shape shape : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{2, 3, 4}}) {
      array a = astype(random::uniform(-50.0, 50.0, shape, float32), t);
      std::string f = dir + "/a_" + dtype_name(t) + std::to_string(shape.size());
      save(f, a);
      array b = load(f + ".npy");
      expect_equal_arrays(a, b);
    }
  }
}

TEST(Npy, SavesNonContiguousArraysInLogicalOrder) {
  std::string dir = temp_dir();
  array a = transpose(reshape(arange(12.0, float32), {3, 4}));
  save(dir + "/t.npy", a);
  expect_equal_arrays(load(dir + "/t.npy"), contiguous(a));
  array s = slice(arange(20, int32), {1}, {19}, {3});
  save(dir + "/s.npy", s);
  expect_equal_arrays(load(dir + "/s.npy"), s);
}

TEST(Npy, NpzRoundTrip) {
  std::string dir = temp_dir();
  std::unordered_map<std::string, array> m = {{"w", random::normal({4, 6})},
                                               {"idx", arange(5, int32)},
                                               {"scalar", array(3.5)}};
  savez(dir + "/m", m);
  auto back = load_npz(dir + "/m.npz");
  ASSERT_EQ(back.size(), 3u);
  for (auto& [k, v] : m) expect_equal_arrays(back.at(k), v);
}

TEST(Npy, MalformedFilesAreErrors) {
  std::string dir = temp_dir();
  save(dir + "/ok.npy", arange(100.0, float32));
  std::ifstream in(dir + "/ok.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir + "/" + name, std::ios::binary) << b;
    return dir + "/" + name;
  };
  EXPECT_TRUE(test::throws_error([&] { load(write("trunc.npy", bytes.substr(0, bytes.size() - 10))); }, {"header says"}));
  EXPECT_TRUE(test::throws_error([&] { load(write("magic.npy", "PK" + bytes.substr(2))); }, {"bad magic"}));
  EXPECT_TRUE(test::throws_error([&] { load(write("short.npy", bytes.substr(0, 5))); }, {"bad magic"}));
  // timedelta64 has no Kiln dtype ('<c8' loads as complex64: test_complex.cpp).
  std::string timedelta = bytes;
  timedelta.replace(timedelta.find("<f4"), 3, "<m8");
  EXPECT_TRUE(test::throws_error([&] { load(write("timedelta.npy", timedelta)); }, {"no Kiln equivalent"}));
  std::string huge = bytes;
  huge.replace(huge.find("(100,)"), 6, "(9999999999,)");
  EXPECT_TRUE(test::throws_error([&] { load(write("huge.npy", huge)); }, {"too large"}));
  EXPECT_TRUE(test::throws_error([&] { load(dir + "/missing.npy"); }, {"cannot open"}));
  EXPECT_TRUE(test::throws_error([&] { load_npz(write("notzip.npz", bytes)); }, {"not a zip file"}));
}

TEST(Npy, NumpyReadsWhatKilnWrites) {
  if (!have_numpy()) GTEST_SKIP() << "python3 with numpy is not installed";
  std::string dir = temp_dir();
  save(dir + "/k_f32.npy", reshape(arange(24.0, float32), {2, 3, 4}) * array(0.5f));
  save(dir + "/k_i64.npy", astype(arange(-3, 4), int64));
  save(dir + "/k_bool.npy", arange(6, int32) > array(2));
  save(dir + "/k_f16.npy", astype(arange(10.0, float32), float16));
  savez(dir + "/k.npz", {{"a", arange(5, int32)}, {"b", ones({2, 2}, float64)}});
  save(dir + "/k_i16.npy", astype(arange(-3, 4), int16) * array(int16_t{1000}));
  save(dir + "/k_u16.npy", astype(arange(4), uint16) * array(uint16_t{20000}));
  save(dir + "/k_u64.npy", array({uint64_t{0}, uint64_t{1} << 63, ~uint64_t{0}}));
  std::string script = "import numpy as np\nd = '" + dir + "'\n" + R"(
a = np.load(d + '/k_f32.npy'); assert a.dtype == np.float32 and a.shape == (2, 3, 4)
assert (a == np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5).all()
b = np.load(d + '/k_i64.npy'); assert b.dtype == np.int64 and (b == np.arange(-3, 4)).all()
c = np.load(d + '/k_bool.npy'); assert c.dtype == np.bool_ and (c == (np.arange(6) > 2)).all()
e = np.load(d + '/k_f16.npy'); assert e.dtype == np.float16 and (e == np.arange(10)).all()
z = np.load(d + '/k.npz'); assert (z['a'] == np.arange(5)).all() and (z['b'] == 1).all()
f = np.load(d + '/k_i16.npy'); assert f.dtype == np.int16 and (f == np.arange(-3, 4) * 1000).all()
g = np.load(d + '/k_u16.npy'); assert g.dtype == np.uint16 and (g == np.arange(4) * 20000).all()
h = np.load(d + '/k_u64.npy'); assert h.dtype == np.uint64 and h.tolist() == [0, 2**63, 2**64 - 1]
)";
  EXPECT_EQ(run_python(script), 0);
}

TEST(Npy, KilnReadsWhatNumpyWrites) {
  if (!have_numpy()) GTEST_SKIP() << "python3 with numpy is not installed";
  std::string dir = temp_dir();
  std::string script = "import numpy as np\nd = '" + dir + "'\n" + R"(
x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.25
np.save(d + '/n_f32.npy', x)
np.save(d + '/n_fortran.npy', np.asfortranarray(x))
np.save(d + '/n_big.npy', x.astype('>f4'))
np.save(d + '/n_i8.npy', np.arange(-5, 5, dtype=np.int8))
np.save(d + '/n_u32.npy', np.arange(7, dtype=np.uint32) * 1000000)
np.save(d + '/n_scalar.npy', np.float64(2.5))
np.save(d + '/n_i16.npy', np.arange(-5, 5, dtype=np.int16) * 3000)
np.save(d + '/n_u16.npy', np.arange(5, dtype=np.uint16) * 16000)
np.save(d + '/n_u64.npy', np.array([0, 2**63 + 1, 2**64 - 1], dtype='>u8'))
np.savez(d + '/n.npz', x=x, y=np.arange(3))
np.savez_compressed(d + '/n_c.npz', x=x, big=np.zeros(100000, dtype=np.float32))
)";
  ASSERT_EQ(run_python(script), 0);
  array x = reshape(arange(24.0, float32), {2, 3, 4}) - array(7.25f);
  expect_equal_arrays(load(dir + "/n_f32.npy"), x);
  expect_equal_arrays(load(dir + "/n_fortran.npy"), x);
  expect_equal_arrays(load(dir + "/n_big.npy"), x);
  expect_equal_arrays(load(dir + "/n_i8.npy"), astype(arange(-5, 5), int8));
  expect_equal_arrays(load(dir + "/n_u32.npy"), astype(arange(7), uint32) * array(1000000u));
  expect_equal_arrays(load(dir + "/n_scalar.npy"), array(2.5));
  expect_equal_arrays(load(dir + "/n_i16.npy"), astype(arange(-5, 5), int16) * array(int16_t{3000}));
  expect_equal_arrays(load(dir + "/n_u16.npy"), astype(arange(5), uint16) * array(uint16_t{16000}));
  expect_equal_arrays(load(dir + "/n_u64.npy"), array({uint64_t{0}, (uint64_t{1} << 63) + 1, ~uint64_t{0}}));
  auto z = load_npz(dir + "/n.npz");
  expect_equal_arrays(z.at("x"), x);
  expect_equal_arrays(z.at("y"), arange(3, int64));
  auto zc = load_npz(dir + "/n_c.npz");
  expect_equal_arrays(zc.at("x"), x);
  expect_equal_arrays(zc.at("big"), zeros({100000}, float32));
}
