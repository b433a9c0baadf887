// A tiny consumer of streamkit: compiles against the package and runs with or without a GPU.
#include <streamkit/streamkit.hpp>

#include <cstdio>

int main()
{
  int const devices = streamkit::device_count();
  std::printf("streamkit consumer: %d CUDA device(s)\n", devices);
  if (devices > 0) {
    streamkit::stream const s(0);
    streamkit::device_buffer<float> buffer(16, s);
    s.sync();
  }
  return 0;
}
