/* See fault.h. */
#include "fault.h"

#include "dev.h"
#include "devstate.h"
#include "errors.h"
#include "uvcuda.h"

int uvn_fault_check(struct uvn_dev *d, uint64_t gen) {
  int err = uvcuda_context_health((uvcuda_context_t)d->ctx);
  if (uvcuda_cuda_result(err) != 0) uvn_devstate_note_fault(d->ordinal, gen, err);
  return err;
}

void uvn_fault_after_error(struct uvn_dev *d, int err) {
  uint64_t gen;
  if (d == NULL || uvcuda_cuda_result(err) == 0) return;
  if (uvn_devstate_enter(d->ordinal, &gen) != 0) return; /* a reset runs */
  uvn_fault_check(d, gen);
  uvn_devstate_leave(d->ordinal);
}

napi_value uvn_fault_health(napi_env env, struct uvn_dev *d) {
  napi_value v;
  uint64_t gen;
  int err = uvn_devstate_fault_now(d->ordinal);
  if (err == 0 && uvn_devstate_enter(d->ordinal, &gen) == 0) {
    err = uvn_fault_check(d, gen);
    uvn_devstate_leave(d->ordinal);
    if (uvcuda_cuda_result(err) == 0 && err != 0) return uvn_throw_uv(env, err);
  }
  napi_create_string_utf8(env, err == 0 ? "healthy" : uvcuda_err_name(err), NAPI_AUTO_LENGTH,
                          &v);
  return v;
}
