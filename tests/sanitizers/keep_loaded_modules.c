/* Preloaded into the MPI ranks of the ASan run (run_asan.sh): dlclose does nothing. Open MPI
 * unloads its components before exit, and LeakSanitizer cannot name a frame in an unloaded
 * library, so no suppression could match what those components keep until exit. Kept mapped,
 * their allocations match lsan.supp by library name, and a leak from adakv code is reported. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
