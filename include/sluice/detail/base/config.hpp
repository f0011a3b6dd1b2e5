// What sluice's headers require of the compiler and of Boost, checked up front so that a
// wrong setup fails with one clear message instead of pages of template errors. Included
// first by error.hpp and decision.hpp, which every limiter header reaches.
#pragma once

#if defined(_MSVC_LANG) && _MSVC_LANG > __cplusplus
#define SLUICE_DETAIL_CPLUSPLUS _MSVC_LANG
#else
#define SLUICE_DETAIL_CPLUSPLUS __cplusplus
#endif
#if SLUICE_DETAIL_CPLUSPLUS < 202002L
#error "sluice needs C++20 or later (coroutines, concepts): compile with -std=c++20 or newer"
#endif
#undef SLUICE_DETAIL_CPLUSPLUS

#include <boost/version.hpp>
#if BOOST_VERSION < 108100
#error "sluice needs Boost 1.81 or later; this Boost is older (BOOST_LIB_VERSION in <boost/version.hpp>)"
#endif

#include <sluice/version.hpp>
