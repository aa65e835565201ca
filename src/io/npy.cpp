// numpy's .npy and .npz files (format in include/kiln/io.h).
//
// .npy: "\x93NUMPY", a version byte pair, the header length (uint16 in 1.0,
// uint32 in 2.0 and 3.0), then a Python dict literal {'descr': '<f4',
// 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a
// newline so the data starts on a 64-byte boundary, then the data.
// .npz: a zip archive with one NAME.npy member per array; members are read
// stored or deflated (zlib), and written stored, as numpy.savez does.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include "io/array_bytes.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::string with_extension(std::string file, const char* ext) {
  auto slash = file.find_last_of('/');
  auto dot = file.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) file += ext;
  return file;
}

// numpy's array-protocol type string; bfloat16, which numpy lacks, is 'V2'
// as MLX writes it.
std::string descr_of(Dtype t) {
  switch (t) {
    case bool_: return "|b1";
    case uint8: return "|u1";
    case int8: return "|i1";
    case uint16: return "<u2";
    case int16: return "<i2";
    case uint32: return "<u4";
    case uint64: return "<u8";
    case int32: return "<i4";
    case int64: return "<i8";
    case float16: return "<f2";
    case bfloat16: return "<V2";
    case float32: return "<f4";
    case float64: return "<f8";
    case complex64: return "<c8";
    case float8_e4m3fn:
    case float8_e5m2:
      throw Error(std::string("[save] .npy has no ") + dtype_name(t) +
                  " type (numpy lacks fp8): astype to a wider float or view as uint8 first");
  }
  return "";
}

// Parsed header of an .npy.
struct NpyHeader {
  Dtype dtype = float32;
  bool swap = false;  // big-endian data
  bool fortran = false;
  Shape shape;
};

[[noreturn]] void bad(const std::string& what, const std::string& file) {
  throw Error("[load] " + file + ": " + what);
}

// The value of key `key` in the header dict, as its literal text.
std::string dict_value(const std::string& h, const std::string& key, const std::string& file) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) bad("the .npy header has no '" + key + "'", file);
  auto colon = h.find(':', k);
  if (colon == std::string::npos) bad("malformed .npy header", file);
  size_t b = h.find_first_not_of(' ', colon + 1);
  if (b == std::string::npos) bad("malformed .npy header", file);
  size_t e;
  if (h[b] == '\'') {
    e = h.find('\'', b + 1);
    if (e == std::string::npos) bad("malformed .npy header", file);
    return h.substr(b + 1, e - b - 1);
  }
  if (h[b] == '(') {
    e = h.find(')', b);
    if (e == std::string::npos) bad("malformed .npy header", file);
    return h.substr(b, e - b + 1);
  }
  e = h.find_first_of(",}", b);
  if (e == std::string::npos) bad("malformed .npy header", file);
  return h.substr(b, e - b);
}

NpyHeader parse_header(const std::string& h, const std::string& file) {
  NpyHeader out;
  std::string d = dict_value(h, "descr", file);
  if (d.size() != 3) bad("unsupported dtype '" + d + "'", file);
  char order = d[0];
  std::string kind = d.substr(1);
  static const std::map<std::string, Dtype> kinds = {
      {"b1", bool_},  {"u1", uint8},  {"i1", int8},    {"u2", uint16},  {"i2", int16},   {"u4", uint32},
      {"i4", int32},  {"u8", uint64}, {"i8", int64},   {"f2", float16}, {"V2", bfloat16}, {"f4", float32},
      {"f8", float64}, {"c8", complex64}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) bad("dtype '" + d + "' has no Kiln equivalent", file);
  out.dtype = it->second;
  out.swap = order == '>' && size_of(out.dtype) > 1;
  std::string f = dict_value(h, "fortran_order", file);
  if (f != "False" && f != "True") bad("bad fortran_order '" + f + "'", file);
  out.fortran = f == "True";
  std::string s = dict_value(h, "shape", file);
  size_t i = 1;
  uint64_t total = 1;
  while (i < s.size()) {
    size_t j = s.find_first_of(",)", i);
    std::string tok = s.substr(i, j - i);
    tok.erase(std::remove(tok.begin(), tok.end(), ' '), tok.end());
    if (!tok.empty()) {
      if (tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 10) {
        bad("bad shape " + s, file);
      }
      uint64_t n = std::stoull(tok);
      if (n > static_cast<uint64_t>(std::numeric_limits<int>::max())) bad("dimension too large in " + s, file);
      total *= std::max<uint64_t>(n, 1);
      if (total > (uint64_t{1} << 48)) bad("shape " + s + " is too large", file);
      out.shape.push_back(static_cast<int>(n));
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

// An array from one .npy image held in memory.
array parse_npy(const char* p, size_t n, const std::string& file, Stream s) {
  static const char kMagic[] = "\x93NUMPY";
  if (n < 10 || std::memcmp(p, kMagic, 6) != 0) bad("not an .npy file (bad magic)", file);
  int major = static_cast<unsigned char>(p[6]);
  size_t hlen, start;
  if (major == 1) {
    hlen = static_cast<unsigned char>(p[8]) | (static_cast<size_t>(static_cast<unsigned char>(p[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) bad("truncated .npy header", file);
    uint32_t l;
    std::memcpy(&l, p + 8, 4);
    hlen = l;
    start = 12;
  } else {
    bad("unsupported .npy version " + std::to_string(major), file);
  }
  if (hlen > n - start) bad("truncated .npy header", file);
  NpyHeader h = parse_header(std::string(p + start, hlen), file);
  size_t count = 1;
  for (int d : h.shape) count *= static_cast<size_t>(d);
  size_t bytes = count * size_of(h.dtype);
  const char* data = p + start + hlen;
  if (bytes > n - start - hlen) {
    bad("data holds " + std::to_string(n - start - hlen) + " bytes, the header says " + std::to_string(bytes), file);
  }
  std::vector<char> buf(data, data + bytes);
  if (h.swap) {
    // A complex64 is two big-endian floats, each swapped on its own.
    size_t w = h.dtype == complex64 ? 4 : size_of(h.dtype);
    for (size_t i = 0; i < bytes / w; ++i) std::reverse(buf.begin() + i * w, buf.begin() + (i + 1) * w);
  }
  Shape stored = h.shape;
  if (h.fortran) std::reverse(stored.begin(), stored.end());
  array a = io::make_array(buf.data(), count, stored, h.dtype);
  if (h.fortran) a = contiguous(transpose(a, s), s);
  return a;
}

std::string npy_image(const array& in) {
  array a = contiguous(in);
  a.eval();
  std::string shape;
  for (int d : a.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (a.ndim() == 1) shape += ",";  // numpy spells a one-element tuple "(3,)"
  std::string h = "{'descr': '" + descr_of(a.dtype()) + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  if (h.size() > 65535) throw Error("[save] header of shape too long for an .npy file");
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  out += h;
  out.append(static_cast<const char*>(io::raw_bytes(a)), a.nbytes());
  return out;
}

std::string read_file(const std::string& file, const char* op) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error(std::string("[") + op + "] cannot open " + file);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string& file, const std::string& bytes, const char* op) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(std::string("[") + op + "] cannot open " + file + " for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error(std::string("[") + op + "] failed writing " + file);
}

// ---- zip (the parts .npz needs: local headers, central directory, end record) ----

uint32_t rd32(const std::string& z, size_t at) {
  uint32_t v;
  std::memcpy(&v, z.data() + at, 4);
  return v;
}
uint16_t rd16(const std::string& z, size_t at) {
  uint16_t v;
  std::memcpy(&v, z.data() + at, 2);
  return v;
}
void wr32(std::string& z, uint32_t v) { z.append(reinterpret_cast<const char*>(&v), 4); }
void wr16(std::string& z, uint16_t v) { z.append(reinterpret_cast<const char*>(&v), 2); }

std::string inflate_raw(const char* src, size_t n, size_t out_size, const std::string& file) {
  std::string out(out_size, '\0');
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) bad("zlib init failed", file);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(src));
  zs.avail_in = static_cast<uInt>(n);
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out_size);
  int r = inflate(&zs, Z_FINISH);
  inflateEnd(&zs);
  if (r != Z_STREAM_END || zs.total_out != out_size) bad("corrupt deflated member", file);
  return out;
}

}  // namespace

void save(std::string file, array a) { write_file(with_extension(std::move(file), ".npy"), npy_image(a), "save"); }

array load(std::string file, StreamOrDevice s) {
  Stream st = to_stream(s);
  std::string bytes = read_file(file, "load");
  return parse_npy(bytes.data(), bytes.size(), file, st);
}

void savez(std::string file, std::unordered_map<std::string, array> arrays) {
  file = with_extension(std::move(file), ".npz");
  std::map<std::string, array> ordered(arrays.begin(), arrays.end());
  std::string z, central;
  uint16_t count = 0;
  for (auto& [name, a] : ordered) {
    if (name.empty() || name.size() > 60000) throw Error("[savez] bad array name '" + name + "'");
    if (++count == 0xffff) throw Error("[savez] too many arrays for a zip file");
    std::string data = npy_image(a);
    std::string member = name + ".npy";
    if (z.size() + data.size() > 0xfffffff0u) throw Error("[savez] " + file + " would exceed 4 GiB (zip64 is not written)");
    uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    uint32_t offset = static_cast<uint32_t>(z.size());
    // Local header: version 2.0, no flags, stored, no time.
    wr32(z, 0x04034b50); wr16(z, 20); wr16(z, 0); wr16(z, 0); wr16(z, 0); wr16(z, 0x21);
    wr32(z, crc); wr32(z, static_cast<uint32_t>(data.size())); wr32(z, static_cast<uint32_t>(data.size()));
    wr16(z, static_cast<uint16_t>(member.size())); wr16(z, 0);
    z += member;
    z += data;
    wr32(central, 0x02014b50); wr16(central, 20); wr16(central, 20); wr16(central, 0); wr16(central, 0);
    wr16(central, 0); wr16(central, 0x21); wr32(central, crc); wr32(central, static_cast<uint32_t>(data.size()));
    wr32(central, static_cast<uint32_t>(data.size())); wr16(central, static_cast<uint16_t>(member.size()));
    wr16(central, 0); wr16(central, 0); wr16(central, 0); wr16(central, 0); wr32(central, 0); wr32(central, offset);
    central += member;
  }
  uint32_t cd_offset = static_cast<uint32_t>(z.size());
  z += central;
  wr32(z, 0x06054b50); wr16(z, 0); wr16(z, 0); wr16(z, count); wr16(z, count);
  wr32(z, static_cast<uint32_t>(central.size())); wr32(z, cd_offset); wr16(z, 0);
  write_file(file, z, "savez");
}

std::unordered_map<std::string, array> load_npz(const std::string& file, StreamOrDevice s) {
  Stream st = to_stream(s);
  std::string z = read_file(file, "load");
  // The end-of-central-directory record: the last 22 bytes, or earlier by
  // the length of an archive comment.
  if (z.size() < 22) bad("not a zip file", file);
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;) {
    if (rd32(z, i) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) bad("not a zip file (no end record)", file);
  size_t n = rd16(z, eocd + 10);
  size_t at = rd32(z, eocd + 16);
  std::unordered_map<std::string, array> out;
  for (size_t k = 0; k < n; ++k) {
    if (at + 46 > z.size() || rd32(z, at) != 0x02014b50) bad("corrupt central directory", file);
    uint16_t method = rd16(z, at + 10);
    size_t csize = rd32(z, at + 20), usize = rd32(z, at + 24);
    size_t nlen = rd16(z, at + 28), xlen = rd16(z, at + 30), clen = rd16(z, at + 32);
    size_t local = rd32(z, at + 42);
    if (at + 46 + nlen > z.size()) bad("corrupt central directory", file);
    std::string name = z.substr(at + 46, nlen);
    at += 46 + nlen + xlen + clen;
    if (csize == 0xffffffffu || usize == 0xffffffffu || local == 0xffffffffu) bad("zip64 members are not supported", file);
    if (local + 30 > z.size() || rd32(z, local) != 0x04034b50) bad("corrupt local header of " + name, file);
    size_t data = local + 30 + rd16(z, local + 26) + rd16(z, local + 28);
    if (data > z.size() || csize > z.size() - data) bad("member " + name + " runs past the end", file);
    std::string bytes;
    if (method == 0) {
      bytes = z.substr(data, csize);
    } else if (method == 8) {
      if (usize > (size_t{1} << 40) || usize / 1032 > csize + 1) bad("implausible size of member " + name, file);
      bytes = inflate_raw(z.data() + data, csize, usize, file);
    } else {
      bad("member " + name + " uses unsupported compression method " + std::to_string(method), file);
    }
    std::string key = name.size() > 4 && name.substr(name.size() - 4) == ".npy" ? name.substr(0, name.size() - 4) : name;
    out.insert_or_assign(key, parse_npy(bytes.data(), bytes.size(), file + ":" + name, st));
  }
  return out;
}

}  // namespace kiln
