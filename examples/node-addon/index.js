'use strict';
// The sample addon: $EXAMPLE_ADDON (a Meson build), else node-gyp's build.
const path = require('node:path');

module.exports = require(process.env.EXAMPLE_ADDON ||
                         path.join(__dirname, 'build', 'Release', 'example.node'));
