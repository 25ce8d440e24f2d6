// What every picture and report writer needs: XML escaping, an output folder checked before a
// long run, writing the file, and turning it into a PNG with whatever converter this machine
// has (rsvg-convert from librsvg2-bin, or ImageMagick).
#pragma once

#include <string>

namespace adakv::svg {

// Text safe inside SVG elements and attribute values.
std::string escape(const std::string& s);

// Creates `dir` (and its parents) and checks that a file can be created, written and removed
// in it, so that a tool which writes its results at the end fails at its start instead. Throws
// std::runtime_error("cannot write <path>: <the OS's reason>") naming what failed.
void prepare_output_dir(const std::string& dir);

// Writes `text` to `path`, flushed; throws std::runtime_error("cannot write <path>: <the OS's
// reason>") when the file cannot be opened or written in full (a full disk included).
void write_text_file(const std::string& path, const std::string& text);

// The first SVG-to-PNG converter that works here ("rsvg-convert", "magick" or "convert"), or ""
// when none does; it is tried on a tiny SVG, so a stand-in that cannot render SVG is refused.
std::string find_png_converter();

// Converts with a converter found above (white background); false when it fails or writes
// no PNG.
bool svg_to_png(const std::string& converter, const std::string& svg, const std::string& png);

}  // namespace adakv::svg
