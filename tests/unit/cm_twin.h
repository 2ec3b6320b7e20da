/* The script cm_twin.c's librdmacm calls follow (cffi reads this whole file). */
void twin_cm_next(void *event, int err);
int twin_cm_acked(void);
