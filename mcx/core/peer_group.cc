#include "mcx/core/peer_group.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mcx {
namespace {

struct FactoryRegistry {
  std::mutex mu;
  std::string backend;  // guarded by mu
  PeerGroupFactory factory;  // guarded by mu
};

FactoryRegistry& registry() {
  static FactoryRegistry* r = new FactoryRegistry();  // never destroyed: streams may build groups until exit
  return *r;
}

}  // namespace

void set_peer_group_factory(std::string backend, PeerGroupFactory factory) {
  FactoryRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backend = factory ? std::move(backend) : std::string();
  r.factory = std::move(factory);
}

absl::StatusOr<std::unique_ptr<PeerGroup>> make_peer_group(const PeerGroupRequest& request) {
  PeerGroupFactory factory;
  {
    FactoryRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    factory = r.factory;
  }
  if (!factory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[collective] ", request.key, " spans processes {", absl::StrJoin(request.processes, ","),
        "} but no data plane is installed: call mcx::distributed::initialize() in every process first"));
  }
  return factory(request);
}

std::string peer_group_backend() {
  FactoryRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.backend;
}

}  // namespace mcx
