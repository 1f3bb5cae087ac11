# The thread-pool baseline addon, built by node-gyp (the Meson build of the
# repository builds the same file: ../meson.build). Node's headers only; the
# CUDA driver is dlopen'ed at run time, so no CUDA Toolkit either.
#   cd pool-addon && node-gyp rebuild     # -> build/Release/uvcuda_pool.node
{
  "targets": [
    {
      "target_name": "uvcuda_pool",
      "sources": ["pool.c"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-fvisibility=hidden"],
      "cflags_c": ["-std=gnu11"],
      "libraries": ["-ldl"],
    },
  ],
}
