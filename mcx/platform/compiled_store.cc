#include "mcx/platform/compiled_store.h"

#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"

namespace mcx {
namespace {

struct Installed {
  Mutex mu;
  std::shared_ptr<CompiledStore> store ABSL_GUARDED_BY(mu);
};

Installed& installed() {
  static auto* i = new Installed();  // never destroyed: compiles may run until the process exits
  return *i;
}

}  // namespace

absl::Status CompiledStore::problem(absl::Status why) {
  log_warn("{}", std::string(why.message()));
  return absl::OkStatus();
}

void set_compiled_store(std::shared_ptr<CompiledStore> store) {
  Installed& i = installed();
  MutexLock lock(&i.mu);
  i.store = std::move(store);
}

std::shared_ptr<CompiledStore> compiled_store() {
  Installed& i = installed();
  MutexLock lock(&i.mu);
  return i.store;
}

}  // namespace mcx
