// The example program of the MPI test images (as mpi-operator's examples): every rank integrates
// 4/(1+x^2) over its share of [0,1] with the midpoint rule, rank 0 sums the shares and prints
// the result. Output: "Workers: N" (rank 0), "Rank R on host H" (every rank), then
// "pi is approximately P, error E" (rank 0). Exits 1 when the error is not small.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, workers = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &workers);
    if (rank == 0) {
        std::printf("Workers: %d\n", workers);
        std::fflush(stdout);
    }
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    std::printf("Rank %d on host %s\n", rank, host);
    std::fflush(stdout);

    const long intervals = 10000000;
    const double width = 1.0 / static_cast<double>(intervals);
    double mine = 0.0;
    for (long i = rank; i < intervals; i += workers) {
        const double x = (static_cast<double>(i) + 0.5) * width;
        mine += 4.0 / (1.0 + x * x);
    }
    mine *= width;
    double pi = 0.0;
    MPI_Reduce(&mine, &pi, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 0) {
        const double error = std::fabs(pi - M_PI);
        ok = error < 1e-9;
        std::printf("pi is approximately %.16f, error %.2e\n", pi, error);
        std::fflush(stdout);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
