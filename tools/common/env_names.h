// Names of the environment variables mcx-run sets for its workers. They must match what
// mcx::distributed::initialize reads (mcx/distributed/cluster.h, distributed.h, mtls.h); docs/distributed.md
// lists them all.
#pragma once

namespace mcx::tools {

inline constexpr const char* kEnvCoordinatorAddress = "MCX_COORDINATOR_ADDRESS";
inline constexpr const char* kEnvNumProcesses = "MCX_NUM_PROCESSES";
inline constexpr const char* kEnvProcessId = "MCX_PROCESS_ID";
inline constexpr const char* kEnvProfileDir = "MCX_PROFILE_DIR";
inline constexpr const char* kEnvCpuDeviceCount = "MCX_CPU_DEVICE_COUNT";
inline constexpr const char* kEnvLocalDeviceIds = "MCX_LOCAL_DEVICE_IDS";
inline constexpr const char* kEnvStandaloneCoordinator = "MCX_STANDALONE_COORDINATOR";
inline constexpr const char* kEnvRestartCount = "MCX_RESTART_COUNT";
inline constexpr const char* kEnvRecoverable = "MCX_RECOVERABLE";
inline constexpr const char* kEnvHeartbeatInterval = "MCX_HEARTBEAT_INTERVAL";
inline constexpr const char* kEnvHeartbeatTimeout = "MCX_HEARTBEAT_TIMEOUT";
inline constexpr const char* kEnvInitTimeout = "MCX_INIT_TIMEOUT";
inline constexpr const char* kEnvShutdownTimeout = "MCX_SHUTDOWN_TIMEOUT";
inline constexpr const char* kEnvMtlsCert = "MCX_MTLS_CERT_FILE";
inline constexpr const char* kEnvMtlsKey = "MCX_MTLS_KEY_FILE";
inline constexpr const char* kEnvMtlsCa = "MCX_MTLS_CA_FILE";
inline constexpr const char* kEnvMtlsPeerUriPrefix = "MCX_MTLS_PEER_URI_PREFIX";
inline constexpr const char* kEnvMtlsBindIdentity = "MCX_MTLS_BIND_TASK_IDENTITY";
inline constexpr const char* kEnvRequireMtls = "MCX_REQUIRE_MTLS";

}  // namespace mcx::tools
