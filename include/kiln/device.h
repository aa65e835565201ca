#pragma once
// Devices and streams. Arrays belong to no device: the stream an op is
// given decides where it runs. Every op takes a trailing StreamOrDevice.
#include <tuple>
#include <variant>

namespace kiln {

struct Device {
  enum class DeviceType { cpu, gpu };
  static constexpr DeviceType cpu = DeviceType::cpu;
  static constexpr DeviceType gpu = DeviceType::gpu;

  DeviceType type;
  int index;

  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT(implicit)
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator<(const Device& o) const { return std::tie(type, index) < std::tie(o.type, o.index); }
};
inline bool operator==(const Device& d, Device::DeviceType t) { return d.type == t; }

struct Stream {
  int index;
  Device device;
  bool operator==(const Stream& o) const { return index == o.index && device == o.device; }
  bool operator<(const Stream& o) const { return std::tie(device, index) < std::tie(o.device, o.index); }
};

using StreamOrDevice = std::variant<std::monostate, Stream, Device>;

// True when this build has a GPU backend and a GPU is present.
bool is_available(const Device& d);
Device default_device();
void set_default_device(const Device& d);
Stream default_stream(Device d);
// Makes s the default stream of its device (for every thread).
void set_default_stream(Stream s);
// A stream's tasks run in order on a worker thread that exits after a
// second without work and starts again on demand: idle streams hold no
// thread, so a program may create many.
Stream new_stream(Device d);
// Resolves an op's stream argument: empty -> default stream of the default
// device, a device -> its default stream. Throws kiln::Error for a device
// this build cannot run on.
Stream to_stream(StreamOrDevice s);
// Makes a stream (or a device's default stream) the default stream and its
// device the default device for the lifetime of the object, as MLX's
// StreamContext. On exit both the default device and the default stream of
// the context's device are restored (MLX restores the first device's stream
// only, leaving a changed default on the context's device).
class StreamContext {
 public:
  explicit StreamContext(StreamOrDevice s);
  ~StreamContext();
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

 private:
  Device previous_device_;
  Stream previous_stream_;
};

// Blocks until every task submitted to the stream has finished.
void synchronize(Stream s);
void synchronize();

// Threads used by one CPU kernel (defaults to every core).
int cpu_threads();
void set_cpu_threads(int n);

}  // namespace kiln
