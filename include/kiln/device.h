#pragma once
// Devices and streams. Arrays belong to no device: the stream an op is
// given decides where it runs. Every op takes a trailing StreamOrDevice.
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
};

struct Stream {
  int index;
  Device device;
  bool operator==(const Stream& o) const { return index == o.index; }
};

using StreamOrDevice = std::variant<std::monostate, Stream, Device>;

// True when this build has a GPU backend and a GPU is present.
bool is_available(const Device& d);
Device default_device();
void set_default_device(const Device& d);
Stream default_stream(Device d);
// A stream's tasks run in order on a worker thread that exits after a
// second without work and starts again on demand: idle streams hold no
// thread, so a program may create many.
Stream new_stream(Device d);
// Resolves an op's stream argument: empty -> default stream of the default
// device, a device -> its default stream. Throws kiln::Error for a device
// this build cannot run on.
Stream to_stream(StreamOrDevice s);
// Blocks until every task submitted to the stream has finished.
void synchronize(Stream s);
void synchronize();

// Threads used by one CPU kernel (defaults to every core).
int cpu_threads();
void set_cpu_threads(int n);

}  // namespace kiln
