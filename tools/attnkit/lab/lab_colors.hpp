// The lab plots' colours: the Okabe–Ito palette, which stays distinct for colour-blind readers.
#pragma once

#include "attnkit_viz/canvas.hpp"

namespace attnkit::lab {

inline constexpr viz::Rgb kScaledColor{0, 114, 178};      // blue
inline constexpr viz::Rgb kUnscaledColor{213, 94, 0};     // vermillion
inline constexpr viz::Rgb kUniformColor{150, 150, 150};   // grey: the uniform-weights reference
inline constexpr viz::Rgb kVariantColors[] = {
    {0, 0, 0},        // black
    {0, 114, 178},    // blue
    {86, 180, 233},   // sky blue
    {213, 94, 0},     // vermillion
    {0, 158, 115},    // bluish green
    {230, 159, 0},    // orange
    {204, 121, 167},  // reddish purple
};

}  // namespace attnkit::lab
