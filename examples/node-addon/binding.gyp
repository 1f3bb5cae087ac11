# The sample addon, built by node-gyp against the installed uvcuda package:
# uvcuda's headers from include_dir, and its static library target
# (the promise helper and uvcuda's sources, compiled for this addon) from
# targets. Nothing else: no system libuv, no Meson.
{
  "targets": [
    {
      "target_name": "example",
      "sources": ["src/example.c"],
      "include_dirs": ["<!(node -p \"require('uvcuda').include_dir\")"],
      "dependencies": ["<!(node -p \"require('uvcuda').targets\"):uvcuda_napi"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-fvisibility=hidden"],
      "cflags_c": ["-std=gnu11"],
    },
  ],
}
