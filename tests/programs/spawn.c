/* MPI_Comm_spawn: started without a parent, the program spawns N children of itself (N from
 * argv[1], default 2); each child sends its rank + 1 to the parents' rank 0 through the
 * intercommunicator (MPI_Reduce onto the parent group), and the parents check the sum and the
 * remote group's size. Output (parent rank 0): "spawn: parents=P children=N sum=S OK" (or
 * WRONG); every child: "spawn: child R of N on host H". Exits 1 on a wrong result. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, size;
    char host[256] = "";

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof(host) - 1);
    if (parent == MPI_COMM_NULL) {
        int n = argc > 1 ? atoi(argv[1]) : 2, remote = 0, errs[64];
        long none = 0, sum = 0, expected;
        char *child_argv[] = {"child", NULL};
        if (n < 1 || n > 64) n = 2;
        MPI_Comm_spawn(argv[0], child_argv, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Comm_remote_size(inter, &remote);
        /* The children reduce onto parent rank 0; the parents contribute nothing. */
        MPI_Reduce(&none, &sum, 1, MPI_LONG, MPI_SUM, rank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
        expected = (long) n * (n + 1) / 2;
        if (rank == 0) {
            printf("spawn: parents=%d children=%d sum=%ld %s\n", size, remote, sum,
                   remote == n && sum == expected ? "OK" : "WRONG");
            fflush(stdout);
        }
        MPI_Comm_disconnect(&inter);
        MPI_Finalize();
        return rank == 0 && !(remote == n && sum == expected) ? 1 : 0;
    }
    {
        long mine = rank + 1, unused = 0;
        printf("spawn: child %d of %d on host %s\n", rank, size, host);
        fflush(stdout);
        MPI_Reduce(&mine, &unused, 1, MPI_LONG, MPI_SUM, 0, parent);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
