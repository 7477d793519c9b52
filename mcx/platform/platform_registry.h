// The platforms this build can run on, and the ones this process uses. A backend registers its platform
// (a factory, called once on first use); MCX_PLATFORMS (as JAX_PLATFORMS) chooses among them.
//
// Thread-safety: every function is thread-safe. A platform, once created, lives until the process exits.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/platform/platform.h"

namespace mcx {

using PlatformFactory = std::function<absl::StatusOr<std::unique_ptr<Platform>>()>;

// Registers the platform `name` (lower case: letters, digits, '_'). The factory runs under the registry's lock,
// once, on the first find_platform of the name: it must not call this registry. Without MCX_PLATFORMS, usable platforms
// are preferred by descending priority (a GPU's above the CPU's). Registering a name again replaces its factory
// unless the platform was created already (then FailedPrecondition). InvalidArgument for a malformed name.
absl::Status register_platform(std::string name, int priority, PlatformFactory factory);

// The registered platform names, by descending priority (ties by name).
std::vector<std::string> registered_platforms();

// The platform `name`, created on first use. NotFound naming the registered platforms; the factory's error
// (every later call returns it again) when it could not be created.
absl::StatusOr<Platform*> find_platform(std::string_view name);

// The platforms a list selects, in the list's order: `list` is MCX_PLATFORMS' syntax, names separated by
// commas (spaces around them ignored). Every listed platform must be registered and usable: InvalidArgument
// naming an unknown or repeated name or an empty list, or the listed platform's own error (e.g. a GPU without
// a driver), prefixed with "MCX_PLATFORMS". An empty `list` selects every usable registered platform by
// priority (NotFound when there is none).
absl::StatusOr<std::vector<Platform*>> select_platforms(std::string_view list);

// select_platforms(MCX_PLATFORMS), or select_platforms("") when the variable is unset.
absl::StatusOr<std::vector<Platform*>> selected_platforms();

}  // namespace mcx
