/* MPI_Comm_spawn onto hosts added to the running DVM: the parents (rank 0 of them spawning)
 * spawn N children (argv[1]) with the info keys "add-host" (argv[2], HOST:SLOTS,...: the hosts
 * join the DVM) and "host" (argv[3]: the children go only there). Each child sends rank + 1 to
 * parent rank 0 if it runs on one of the hosts of argv[3] (passed on to it), else 1000, so the
 * sum is right only when every child ran on a listed host. Output (parent rank 0): "spawn: parents=P children=N sum=S OK" (or WRONG);
 * every child: "spawn: child R of N on host H". Exits 1 on a wrong result or a failed spawn. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        int n, remote = 0, errs[64], rc;
        long none = 0, sum = 0, expected;
        char *child_argv[] = {"child", argc > 3 ? argv[3] : "", NULL};
        MPI_Info info;
        if (argc < 4) {
            fprintf(stderr, "usage: %s N ADD-HOSTS HOSTS\n", argv[0]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        n = atoi(argv[1]);
        if (n < 1 || n > 64) n = 2;
        MPI_Info_create(&info);
        MPI_Info_set(info, "add-host", argv[2]);
        MPI_Info_set(info, "host", argv[3]);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        rc = MPI_Comm_spawn(argv[0], child_argv, n, info, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Info_free(&info);
        if (rc != MPI_SUCCESS) {
            if (rank == 0) printf("spawn: MPI_Comm_spawn failed (%d)\n", rc);
            MPI_Finalize();
            return 1;
        }
        MPI_Comm_remote_size(inter, &remote);
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
        /* argv[2]: the hosts the children must run on, comma-separated. */
        const char *list = argc > 2 ? argv[2] : "";
        size_t len = strlen(host);
        int listed = 0;
        for (const char *p = strstr(list, host); p && !listed; p = strstr(p + 1, host)) {
            listed = (p == list || p[-1] == ',') && (p[len] == '\0' || p[len] == ',');
        }
        long mine = listed ? rank + 1 : 1000, unused = 0;
        printf("spawn: child %d of %d on host %s\n", rank, size, host);
        fflush(stdout);
        MPI_Reduce(&mine, &unused, 1, MPI_LONG, MPI_SUM, 0, parent);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
