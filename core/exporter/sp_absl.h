/*
 * What the exporter sets in abseil, whose switches are C++ only
 * (sp_absl.cc). EXPORTER PROCESS ONLY.
 */
#ifndef SP_ABSL_H
#define SP_ABSL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Before grpc_init, while no other thread holds an abseil mutex. */
void sp_absl_no_deadlock_detection(void);

#ifdef __cplusplus
}
#endif

#endif
