#pragma once
// The order of a device lane's copies in the dispatcher (see multi_gpu/dispatcher.hpp).

#include <streamkit/core/event.hpp>

#include <mutex>

namespace streamkit::detail {

/// One direction of a device lane's copies: the copies of its chunks run one after another, in the
/// order the chunks were enqueued. Left to themselves, copies of several streams share the bus and
/// all finish late, which delays every chunk's compute and its copy back.
struct copy_queue {
  explicit copy_queue(int device) : last(device) {}
  std::mutex mutex;
  event last;  ///< recorded after the latest copies enqueued
};
/// Both directions of a device lane.
struct copy_order {
  explicit copy_order(int device) : in(device), out(device) {}
  copy_queue in;
  copy_queue out;
};

}  // namespace streamkit::detail
