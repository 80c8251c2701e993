/* Every rank takes part in an allreduce; then rank 0 exits with the status given as argv[1]
 * (the others with 0), as an MPI program that fails after doing its work. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, code = argc > 1 ? atoi(argv[1]) : 0;
    long one = 1, sum = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("exitcode rank=%d size=%d sum=%ld\n", rank, size, sum);
    fflush(stdout);
    MPI_Finalize();
    return rank == 0 ? code : 0;
}
