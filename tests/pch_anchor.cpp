// Anchors the precompiled header shared by the test binaries.
