// The open connections of one kind (frame protocol, HTTP) and their limit (--max-connections).
// Idle connections must not deny service: at the limit, the least recently active idle one (no
// call or request under way, no byte of the next one received) is asked to close to make room
// for the new one; only when none is idle is the new one refused. Before this, 1,024 clients that
// connected and sent nothing locked everyone out for as long as they stayed.
//
// T is Connection or HttpSession: `bool idle() const` and `int64_t last_active() const` (steady
// clock ticks; both atomics, since they are read here, on the server's strand, while the
// connection's own strand writes them), and `void evict()` (closes it on its strand if it is
// still idle then; a connection that became busy meanwhile stays, over the limit by one until a
// connection closes). Touched on the server's strand alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace lockstep::serve {

template <class T>
class ConnectionSlots {
 public:
  explicit ConnectionSlots(size_t limit) : limit_(limit) {}

  // Whether one more connection may be admitted: under the limit, or once the least recently
  // active idle connection has been asked to close. False when every open connection is busy.
  bool make_room() {
    if (open_.size() - leaving_.size() < limit_) return true;
    T* oldest = nullptr;
    for (const auto& [address, connection] : open_) {
      if (leaving_.count(address) || !connection->idle()) continue;
      if (!oldest || connection->last_active() < oldest->last_active()) oldest = address;
    }
    if (!oldest) return false;
    leaving_.insert(oldest);  // counted out from now: its close completes on its own strand
    open_.at(oldest)->evict();
    return true;
  }
  void add(std::shared_ptr<T> connection) {
    T* address = connection.get();
    open_.emplace(address, std::move(connection));
  }
  // Once a connection has closed.
  void remove(T* connection) {
    open_.erase(connection);
    leaving_.erase(connection);
  }
  template <class F>
  void for_each(F&& f) {
    for (auto& [address, connection] : open_) f(*connection);
  }
  size_t limit() const { return limit_; }

 private:
  size_t limit_;
  std::unordered_map<T*, std::shared_ptr<T>> open_;
  std::unordered_set<T*> leaving_;  // asked to close, not yet closed
};

}  // namespace lockstep::serve
