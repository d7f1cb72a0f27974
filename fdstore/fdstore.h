#define FDSTORE_MAX_PUT 8
#define FDSTORE_MAX_CLOSE 64
int jaild_fdstore_start(int sock);
