# uvcuda for Node-API addons, built with node-gyp: the promise helper
# (src/uvcuda_napi.c, include/uvcuda/napi.h) and uvcuda itself (lib/*.c),
# as a static library that node-gyp links INTO the addon that depends on it.
# Compiled against Node's own headers (its uv.h): uv_* and napi_* resolve
# from the node binary, never from a system libuv. Used by this package's
# binding.gyp and by third-party addons:
#
#   "include_dirs": ["<!(node -p \"require('uvcuda').include_dir\")"],
#   "dependencies": ["<!(node -p \"require('uvcuda').targets\"):uvcuda_napi"]
#
# (see examples/node-addon/ and docs/guide-node.md in the repository).
{
  "variables": {
    # deps/uvcuda in the npm package, else the repository (scripts/gyp.js)
    "uvcuda_root": "<!(node scripts/gyp.js root)",
  },
  "targets": [
    {
      "target_name": "uvcuda_napi",
      "type": "static_library",
      "sources": [
        "src/uvcuda_napi.c",
        "<!@(node scripts/gyp.js sources)",
      ],
      # No CUDA Toolkit: lib/cuda-api.h declares the driver API uvcuda and
      # the helper use (the driver is dlopen'ed at run time).
      "include_dirs": [
        "<(uvcuda_root)/include",
        "<(uvcuda_root)/lib",
      ],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-fPIC", "-fvisibility=hidden"],
      "cflags_c": ["-std=gnu11"],
      "direct_dependent_settings": {
        # uvcuda.h, uvcuda/napi.h and cuda-api.h for the addon that
        # depends on this target.
        "include_dirs": [
          "<(uvcuda_root)/include",
          "<(uvcuda_root)/lib",
        ],
      },
      "link_settings": {
        # uvcuda's functions have default visibility (they are a library's
        # API): keep them inside the addon, so that two addons embedding
        # uvcuda never bind to each other's copy.
        "ldflags": ["-Wl,--exclude-libs,uvcuda_napi.a"],
        "libraries": ["-ldl", "-lpthread"],
      },
    },
  ],
}
