/* bench_collectives_mpi: OpenMPI's MPI_Allreduce (f32 sum) and MPI_Allgather on the sizes bench_collectives
 * uses, under mpirun -n N. Rank 0 prints {"name":..,"bytes":..,"processes":N,"mpi_ms":..} per case (median of 5
 * batches). bench/collectives/run.sh joins these lines with bench_collectives' to report the OpenMPI ratio. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long sizes[] = {4L << 10, 64L << 10, 1L << 20, 16L << 20, 64L << 20};
  for (int s = 0; s < 5; ++s) {
    long bytes = sizes[s], count = bytes / 4;
    float* in = malloc(bytes);
    float* out = malloc(bytes);
    float* all = malloc(bytes * n);
    for (long i = 0; i < count; ++i) in[i] = 1.0f + rank;
    double calls_d = 4e6 / (double)bytes;
    int calls = calls_d < 1 ? 1 : (calls_d > 200 ? 200 : (int)calls_d);
    for (int op = 0; op < 2; ++op) {
      double t[5];
      if (op == 0) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else MPI_Allgather(in, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
      for (int b = 0; b < 5; ++b) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < calls; ++i) {
          if (op == 0) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          else MPI_Allgather(in, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
        }
        t[b] = (MPI_Wtime() - t0) * 1e3 / calls;
      }
      qsort(t, 5, sizeof(double), cmp);
      if (rank == 0) {
        printf("{\"name\":\"%s\",\"bytes\":%ld,\"processes\":%d,\"mpi_ms\":%.4f}\n", op == 0 ? "all_reduce" : "all_gather",
               bytes, n, t[2]);
        fflush(stdout);
      }
    }
    free(in);
    free(out);
    free(all);
  }
  MPI_Finalize();
  return 0;
}
