// guarded.inl -- exception-to-status translation for the Poplar backend.
// Included by backend.hpp only.
#include <exception>
#include <new>

#include <poplar/exceptions.hpp>
#include <popart/error.hpp>

namespace nxhal_gc {

template <class Body>
nxhal_status_t* guarded(const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (const poplar::graph_memory_allocation_error& e) {
    // The program does not fit in tile memory: the user can lower
    // available_memory_proportion or use more IPUs.
    return make_status(NXHAL_RESOURCE_EXHAUSTED,
                       std::string("graphcore: ") + what + ": out of IPU tile memory: " + e.what());
  } catch (const popart::memory_allocation_err& e) {
    // PopART catches Poplar's graph_memory_allocation_error while compiling
    // and rethrows it as this popart::error subclass: catch it before
    // popart::error, which would make it INVALID_ARGUMENT.
    return make_status(NXHAL_RESOURCE_EXHAUSTED, std::string("graphcore: ") + what +
                                                     ": out of IPU tile memory: " + e.what() +
                                                     " (lower available_memory_proportion or "
                                                     "use more IPUs)");
  } catch (const poplar::poplar_error& e) {
    return make_status(NXHAL_INTERNAL, std::string("graphcore: ") + what + ": Poplar: " + e.what());
  } catch (const popart::error& e) {
    // PopART reports malformed or unsupported models through popart::error.
    return make_status(NXHAL_INVALID_ARGUMENT,
                       std::string("graphcore: ") + what + ": PopART: " + e.what());
  } catch (const std::bad_alloc&) {
    return make_status(NXHAL_RESOURCE_EXHAUSTED,
                       std::string("graphcore: ") + what + ": out of host memory");
  } catch (const std::exception& e) {
    return make_status(NXHAL_INTERNAL, std::string("graphcore: ") + what + ": " + e.what());
  } catch (...) {
    return make_status(NXHAL_INTERNAL,
                       std::string("graphcore: ") + what + ": unknown C++ exception");
  }
}

}  // namespace nxhal_gc
