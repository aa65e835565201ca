#pragma once
// kiln::fft: discrete Fourier transforms (MLX's mlx/fft.h, numpy's
// numpy.fft). One primitive (FFT: axes, inverse, real) serves every
// transform; the CPU runs KissFFT, the GPU cuFFT. Complex transforms take
// and give complex64 (real inputs are cast); the real ones (rfft*) take
// float32 and give the n / 2 + 1 non-negative frequencies, and their
// inverses (irfft*) give float32 with a last axis of n (default 2 * (m - 1)
// for an input of m bins).
//
// `n` / `s` is the number of points per transformed axis: the input is
// truncated or zero-padded to it. `axes` must be distinct and in range;
// defaults: the last axis (fft, ifft, rfft, irfft), the last two (the "2"
// variants), every axis (the "n" variants). norm: Backward (no scaling
// forward, 1 / n inverse), Ortho (1 / sqrt(n) both ways), Forward (1 / n
// forward, none inverse).
//
// Differences from MLX: none in the API. Float64 inputs compute in
// complex64 / float32 (Kiln has no complex128, like MLX).
#include <vector>

#include "kiln/array.h"
#include "kiln/device.h"

namespace kiln::fft {

enum class FFTNorm {
  Backward,
  Ortho,
  Forward,
};

// n-dimensional transforms over `axes` (every axis when not given).
array fftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array fftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array fftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

// One-dimensional transforms along `axis` (default the last).
array fft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array fft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

// Two-dimensional transforms (default axes {-2, -1}).
array fft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array fft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

// Transforms of real input: the last of `axes` is the real one.
array rfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

// Sample frequencies of an n-point transform with sample spacing d (float32).
array fftfreq(int n, double d = 1.0, StreamOrDevice s = {});
array rfftfreq(int n, double d = 1.0, StreamOrDevice s = {});

// The zero frequency moved to the centre (a roll by size / 2 along each
// axis, every axis by default), and its inverse.
array fftshift(const array& a, StreamOrDevice s = {});
array fftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array ifftshift(const array& a, StreamOrDevice s = {});
array ifftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});

}  // namespace kiln::fft
