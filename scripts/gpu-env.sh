# Sourced by the scripts that run on a GPU machine without a Vulkan loader or a network
# (scripts/bench-dawn.sh, scripts/side-by-side.sh): unpacks the loader's .debs from .gl/
# (`scripts/side-by-side.sh prepare` downloads them: the loader and GLVND's libraries, which
# NVIDIA's Vulkan driver needs to create an instance), points Vulkan and EGL at NVIDIA's
# vendor files where the machine has them, and sets XDG_RUNTIME_DIR (Mesa and wgpu warn
# without it).
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null || true
J=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $J ] && export VK_DRIVER_FILES=$J
E=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f $E ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$E
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
