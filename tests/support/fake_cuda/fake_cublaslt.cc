// A stand-in cuBLASLt for tests on machines without a GPU (built as libcublasLt.so.13 next to the stand-in
// driver, found first through MCX_CUDA_LIBRARY_PATH): the functions mcx resolves, over the stand-in's host
// memory. cublasLtMatmul computes D = alpha A B + beta C, column-major, batched by the layouts' batch count and
// strides, without transposes (mcx sets none), accumulating in double and rounding once to the output's type:
// a reference for the products' tests, not a model of the GPU's rounding (TF32 is the gpu label's to check).
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

double load(cudaDataType_t t, const void* base, int64_t i) {
  switch (t) {
    case CUDA_R_64F: return static_cast<const double*>(base)[i];
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return static_cast<double>(static_cast<const _Float16*>(base)[i]);
    case CUDA_R_16BF: {
      const uint32_t bits = uint32_t{static_cast<const uint16_t*>(base)[i]} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return std::nan("");
  }
}

void store(cudaDataType_t t, void* base, int64_t i, double v) {
  switch (t) {
    case CUDA_R_64F: static_cast<double*>(base)[i] = v; break;
    case CUDA_R_32F: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case CUDA_R_16F: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(v); break;
    case CUDA_R_16BF: {  // double to float (rounded), then to bfloat16 rounding to nearest even
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t out;
      if (std::isnan(f)) {
        out = static_cast<uint16_t>((bits >> 16) | 0x40);
      } else {
        out = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
      }
      static_cast<uint16_t*>(base)[i] = out;
      break;
    }
    default: break;
  }
}

}  // namespace

// NOLINTBEGIN(readability-identifier-naming): cuBLASLt's names
extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
size_t cublasLtGetVersion() { return CUBLAS_VERSION; }
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_(fake)"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "the stand-in cuBLASLt"; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<Desc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t) {
  return CUBLAS_STATUS_NOT_SUPPORTED;  // mcx sets none (no transposes, no epilogues)
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  auto* l = reinterpret_cast<Layout*>(layout);
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof(int32_t)) {
    std::memcpy(&l->batch, buf, size);
  } else if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof(int64_t)) {
    std::memcpy(&l->stride, buf, size);
  } else {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<int*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* found) {
  const auto* la = reinterpret_cast<const Layout*>(a);
  const auto* lb = reinterpret_cast<const Layout*>(b);
  const auto* lc = reinterpret_cast<const Layout*>(c);
  if (la->cols != lb->rows || la->rows != lc->rows || lb->cols != lc->cols) return CUBLAS_STATUS_INVALID_VALUE;
  *found = requested > 0 ? 1 : 0;
  if (requested > 0) {
    std::memset(&results[0], 0, sizeof(results[0]));
    results[0].state = CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t adesc, const void* b, cublasLtMatrixLayout_t bdesc,
                              const void* beta, const void* c, cublasLtMatrixLayout_t cdesc, void* d,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  const auto* md = reinterpret_cast<const Desc*>(desc);
  const auto* la = reinterpret_cast<const Layout*>(adesc);
  const auto* lb = reinterpret_cast<const Layout*>(bdesc);
  const auto* lc = reinterpret_cast<const Layout*>(cdesc);
  const auto* ld = reinterpret_cast<const Layout*>(ddesc);
  const bool f64_scale = md->scale == CUDA_R_64F;
  const double al = f64_scale ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64_scale ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const int64_t m = static_cast<int64_t>(ld->rows), n = static_cast<int64_t>(ld->cols);
  const int64_t k = static_cast<int64_t>(la->cols);
  for (int32_t batch = 0; batch < ld->batch; ++batch) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += load(la->type, a, batch * la->stride + i + p * la->ld) *
                 load(lb->type, b, batch * lb->stride + p + j * lb->ld);
        }
        double out = al * sum;
        if (be != 0) out += be * load(lc->type, c, batch * lc->stride + i + j * lc->ld);
        store(ld->type, d, batch * ld->stride + i + j * ld->ld, out);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
// NOLINTEND(readability-identifier-naming)
