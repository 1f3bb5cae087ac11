# The uvcuda addon (uvcuda.node), built by node-gyp: at `npm install` where no
# prebuild in prebuilds/ fits (or with --build-from-source), and by
# `npm run prebuildify` to make that prebuild. The repository's Meson build
# (meson.build here) builds the same addon for development and its tests;
# both compile the sources listed in sources.txt.
{
  "variables": {
    # deps/uvcuda in the npm package, else the repository (scripts/gyp.js)
    "uvcuda_root": "<!(node scripts/gyp.js root)",
  },
  "targets": [
    {
      "target_name": "uvcuda",
      "dependencies": ["uvcuda.gyp:uvcuda_napi"],
      "sources": ["<!@(node scripts/gyp.js addon-sources)"],
      "include_dirs": ["src", "<(uvcuda_root)/support"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-fvisibility=hidden"],
      "cflags_c": ["-std=gnu11"],
      "ldflags": ["-Wl,--version-script=<(module_root_dir)/src/uvcuda.map"],
    },
  ],
}
