#pragma once
// The part every test communicator wrapper shares: it holds the wrapped communicator and a record shared with the
// communicators split from it, and forwards what it does not watch. A wrapper derives from it (CRTP), inherits its
// constructor and `isend`, and defines `isend(std::span<const T>, peer, tag)`, which the non-const form forwards to.

#include <memory>
#include <span>
#include <utility>

#include "hitch/concepts/communicator.hpp"

namespace hitch_test {

template <class Derived, hitch::communicator C, class Shared>
class forwarding_communicator {
public:
    using request = typename C::request;

    forwarding_communicator(C inner, std::shared_ptr<Shared> shared)
        : inner_(std::move(inner)), shared_(std::move(shared)) {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }
    [[nodiscard]] int max_tag() const { return inner_.max_tag(); }
    [[nodiscard]] hitch::seconds_f timeout() const { return inner_.timeout(); }
    void set_timeout(hitch::seconds_f t) { inner_.set_timeout(t); }

    template <class T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return static_cast<Derived&>(*this).isend(std::span<const T>(data), peer, tag);
    }
    template <class T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        return inner_.irecv(data, peer, tag);
    }
    [[nodiscard]] hitch::message_info probe(int peer, int tag) { return inner_.probe(peer, tag); }
    void barrier() { inner_.barrier(); }
    [[nodiscard]] Derived split(int color, int key) { return Derived(inner_.split(color, key), shared_); }

protected:
    C inner_;
    std::shared_ptr<Shared> shared_;
};

}  // namespace hitch_test
