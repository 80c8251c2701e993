/* Each rank contributes rank+1; every rank checks the sum n(n+1)/2 and reports its host. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    long mine, sum = 0, expected;
    char host[256] = "";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof(host) - 1);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    expected = (long) size * (size + 1) / 2;
    printf("allreduce rank=%d size=%d host=%s sum=%ld %s\n", rank, size, host, sum,
           sum == expected ? "OK" : "WRONG");
    fflush(stdout);
    MPI_Finalize();
    return sum == expected ? 0 : 1;
}
