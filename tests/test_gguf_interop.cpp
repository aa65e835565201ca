// Interop with the Python reference implementations: gguf-py (llama.cpp's
// own writer, reader and quantizers) and the safetensors package. Each test
// skips with a message when python3 lacks the package.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/gguf.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
namespace g = kiln::gguf;

namespace {

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("kiln_gguf_py_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

bool have_python(const std::string& modules) {
  return std::system(("python3 -c 'import " + modules + "' >/dev/null 2>&1").c_str()) == 0;
}

int run_python(const std::string& script) {
  std::string path = temp_dir() + "/script.py";
  std::ofstream(path) << "import sys\nD = sys.argv[1]\n" << script;
  return std::system(("python3 " + path + " " + temp_dir()).c_str());
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool same(const array& a, const array& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && array_equal(a, b, true).item<bool>();
}

const char* kPlain[] = {"f32", "f16", "f64", "i8", "i32", "i64"};
const char* kPyQuants[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"};

// gguf-py writes a file with every metadata type and the tensors above,
// and saves each tensor's bytes (and the dequantized values of the block
// formats) as .npy files.
const char* kWriteWithGgufPy = R"(
import numpy as np, gguf
from gguf import GGUFValueType as T, GGMLQuantizationType as Q
w = gguf.GGUFWriter(D + "/py.gguf", "llama")
w.add_uint8("u8", 200); w.add_int8("i8", -100); w.add_uint16("u16", 60000); w.add_int16("i16", -30000)
w.add_uint32("u32", 4000000000); w.add_int32("i32", -2000000000); w.add_float32("f32", 1.5)
w.add_uint64("u64", 2**63 + 5); w.add_int64("i64", -2**62); w.add_float64("f64", 0.1)
w.add_bool("bool", True); w.add_string("str", "h\u00e9llo")
for name, t, v in [("u8", T.UINT8, [1, 2, 255]), ("i8", T.INT8, [-1, 2]), ("u16", T.UINT16, [65535, 0]),
                   ("i16", T.INT16, [-32768, 7]), ("u32", T.UINT32, [7, 8, 9]), ("i32", T.INT32, [-7]),
                   ("f32", T.FLOAT32, [0.25, -3.0]), ("bool", T.BOOL, [True, False, True]),
                   ("u64", T.UINT64, [2**40]), ("i64", T.INT64, [-1, 2**50]), ("f64", T.FLOAT64, [1e300, -2.5])]:
    w.add_key_value("a." + name, v, T.ARRAY, sub_type=t)
w.add_array("a.str", ["a", "bc", "x"])
w.add_key_value("a.nested", [[1, 2], [3]], T.ARRAY)
w.add_custom_alignment(64)
rng = np.random.default_rng(7)
plain = {"f32": rng.standard_normal((3, 5)).astype(np.float32), "f16": rng.standard_normal((7,)).astype(np.float16),
         "f64": rng.standard_normal((2, 1, 3)), "i8": rng.integers(-100, 100, (9,), dtype=np.int8),
         "i32": rng.integers(-10**6, 10**6, (4, 3), dtype=np.int32), "i64": rng.integers(-10**12, 10**12, (2,), dtype=np.int64)}
for n, a in plain.items():
    w.add_tensor(n, a); np.save(D + "/" + n + ".npy", a)
bf = gguf.quants.quantize(rng.standard_normal((4, 6)).astype(np.float32), Q.BF16)
w.add_tensor("bf16", bf, raw_dtype=Q.BF16); np.save(D + "/bf16_deq.npy", gguf.quants.dequantize(bf, Q.BF16))
for n in ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]:
    qt = Q[n.upper()]
    q = gguf.quants.quantize(rng.standard_normal((4, 96)).astype(np.float32), qt)
    w.add_tensor(n, q, raw_dtype=qt)
    np.save(D + "/" + n + ".npy", q); np.save(D + "/" + n + "_deq.npy", gguf.quants.dequantize(q, qt))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
)";

}  // namespace

TEST(GgufPy, KilnReadsGgufPyFilesAndWritesThemByteForByte) {
  if (!have_python("gguf, numpy")) GTEST_SKIP() << "python3 with gguf and numpy is not installed (pip install gguf numpy)";
  ASSERT_EQ(run_python(kWriteWithGgufPy), 0);
  const std::string d = temp_dir();
  g::File f(d + "/py.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get<std::string>("general.architecture"), "llama");
  EXPECT_EQ(f.get<uint8_t>("u8"), 200);
  EXPECT_EQ(f.get<int8_t>("i8"), -100);
  EXPECT_EQ(f.get<uint16_t>("u16"), 60000);
  EXPECT_EQ(f.get<int16_t>("i16"), -30000);
  EXPECT_EQ(f.get<uint32_t>("u32"), 4000000000u);
  EXPECT_EQ(f.get<int32_t>("i32"), -2000000000);
  EXPECT_EQ(f.get<float>("f32"), 1.5f);
  EXPECT_EQ(f.get<uint64_t>("u64"), (1ull << 63) + 5);
  EXPECT_EQ(f.get<int64_t>("i64"), -(1ll << 62));
  EXPECT_EQ(f.get<double>("f64"), 0.1);
  EXPECT_EQ(f.get<bool>("bool"), true);
  EXPECT_EQ(f.get<std::string>("str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get<std::vector<uint8_t>>("a.u8"), (std::vector<uint8_t>{1, 2, 255}));
  EXPECT_EQ(f.get<std::vector<int16_t>>("a.i16"), (std::vector<int16_t>{-32768, 7}));
  EXPECT_EQ(f.get<std::vector<bool>>("a.bool"), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.get<std::vector<double>>("a.f64"), (std::vector<double>{1e300, -2.5}));
  EXPECT_EQ(f.get<std::vector<std::string>>("a.str"), (std::vector<std::string>{"a", "bc", "x"}));
  const auto& nested = f.get<std::vector<g::Value>>("a.nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[1].get<std::vector<int32_t>>(), (std::vector<int32_t>{3}));
  for (const char* n : kPlain) EXPECT_TRUE(same(f.tensor(n), load(d + "/" + n + ".npy"))) << n;
  EXPECT_TRUE(same(astype(f.tensor("bf16"), float32), load(d + "/bf16_deq.npy")));
  for (const char* n : kPyQuants) {
    EXPECT_EQ(g::block_mode(f.find_tensor(n)->type), n);
    EXPECT_EQ(f.find_tensor(n)->shape, (Shape{4, 96}));
    array q = f.tensor(n);
    EXPECT_TRUE(same(q, load(d + "/" + n + ".npy"))) << n;
    array deq = dequantize(q, array({}), std::nullopt, std::nullopt, std::nullopt, n);
    EXPECT_TRUE(test::all_close(deq, test::to_double(load(d + "/" + n + "_deq.npy")), 1e-6, 1e-7)) << n;
  }

  // The same keys and tensors in the same order: the same bytes.
  g::Writer w;
  for (const auto& [k, v] : f.metadata()) w.add(k, v);
  for (const auto& info : f.tensors()) {
    w.add_tensor(info.name, f.tensor(info), g::block_mode(info.type).value_or(""));
  }
  w.write(d + "/kiln.gguf");
  EXPECT_EQ(read_bytes(d + "/kiln.gguf"), read_bytes(d + "/py.gguf"));
}

TEST(GgufPy, GgufPyReadsKilnFilesWithKQuants) {
  if (!have_python("gguf, numpy")) GTEST_SKIP() << "python3 with gguf and numpy is not installed (pip install gguf numpy)";
  const std::string d = temp_dir();
  g::Writer w;
  w.add("general.architecture", "kiln");
  w.add("kiln.tokens", std::vector<std::string>{"<s>", "hello"});
  w.add("kiln.scores", std::vector<float>{0.5f, -1.f});
  w.add("kiln.n", uint32_t{12});
  w.add_tensor("plain", test::random_array({3, 4}, float16));
  for (const char* m : {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_0", "q8_0"}) {
    array q = quantize(test::random_array({2, 512}), std::nullopt, std::nullopt, m)[0];
    w.add_tensor(m, q, m);
    save(d + "/kiln_" + m + "_deq.npy", dequantize(q, array({}), std::nullopt, std::nullopt, std::nullopt, m));
  }
  w.write(d + "/k.gguf");
  EXPECT_EQ(run_python(R"(
import numpy as np, gguf
r = gguf.GGUFReader(D + "/k.gguf")
f = r.fields
assert f["general.architecture"].contents() == "kiln"
assert f["kiln.tokens"].contents() == ["<s>", "hello"], f["kiln.tokens"].contents()
assert f["kiln.scores"].contents() == [0.5, -1.0]
assert f["kiln.n"].contents() == 12 and f["kiln.n"].types == [gguf.GGUFValueType.UINT32]
t = {x.name: x for x in r.tensors}
assert t["plain"].tensor_type == gguf.GGMLQuantizationType.F16 and list(t["plain"].shape) == [4, 3]
for m in ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_0", "q8_0"]:
    x = t[m]
    assert x.tensor_type.name == m.upper(), (m, x.tensor_type)
    got = gguf.quants.dequantize(x.data, x.tensor_type)
    want = np.load(D + "/kiln_" + m + "_deq.npy")
    assert got.shape == want.shape, (m, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=m)
)"),
            0);
}

TEST(SafetensorsPy, PackageFilesLoadAndKilnFilesReadBack) {
  if (!have_python("safetensors, numpy")) {
    GTEST_SKIP() << "python3 with safetensors and numpy is not installed (pip install safetensors numpy)";
  }
  const std::string d = temp_dir();
  ASSERT_EQ(run_python(R"(
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(3)
t = {"f32": rng.standard_normal((3, 4)).astype(np.float32), "f16": rng.standard_normal((5,)).astype(np.float16),
     "f64": rng.standard_normal((2, 2, 2)), "i8": rng.integers(-9, 9, (7,), dtype=np.int8),
     "u8": rng.integers(0, 255, (3,), dtype=np.uint8), "i32": rng.integers(-9, 9, (2, 3), dtype=np.int32),
     "u32": rng.integers(0, 2**32 - 1, (4,), dtype=np.uint32), "i64": rng.integers(-9, 9, (1,), dtype=np.int64),
     "b": np.array([True, False, True]), "empty": np.zeros((0, 3), np.float32)}
save_file(t, D + "/py.safetensors", metadata={"format": "np"})
for k, v in t.items(): np.save(D + "/st_" + k + ".npy", v)
)"),
            0);
  auto [arrays, meta] = load_safetensors(d + "/py.safetensors");
  EXPECT_EQ(meta.at("format"), "np");
  ASSERT_EQ(arrays.size(), 10u);
  for (auto& [k, a] : arrays) EXPECT_TRUE(same(a, load(d + "/st_" + k + ".npy"))) << k;

  std::unordered_map<std::string, array> out = {{"x", test::random_array({3, 5})},
                                                {"h", test::random_array({2, 2}, bfloat16)},
                                                {"t", transpose(test::random_array({2, 3}, int64))}};
  save_safetensors(d + "/kiln.safetensors", out, {{"who", "kiln"}});
  save(d + "/kx.npy", out.at("x"));
  save(d + "/kh.npy", astype(out.at("h"), float32));
  save(d + "/kt.npy", out.at("t"));
  EXPECT_EQ(run_python(R"(
import numpy as np
from safetensors import safe_open
with safe_open(D + "/kiln.safetensors", "np") as f:  # numpy has no bfloat16: h is read below
    np.testing.assert_array_equal(f.get_tensor("x"), np.load(D + "/kx.npy"))
    np.testing.assert_array_equal(f.get_tensor("t"), np.load(D + "/kt.npy"))
    assert f.metadata() == {"who": "kiln"}, f.metadata()
try:
    import torch
    from safetensors.torch import load_file as load_torch
    h = load_torch(D + "/kiln.safetensors")["h"]
    assert h.dtype == torch.bfloat16
    np.testing.assert_array_equal(h.float().numpy(), np.load(D + "/kh.npy"))
except ImportError:
    print("torch is not installed: the bfloat16 tensor is checked by Kiln only")
)"),
            0);
}
