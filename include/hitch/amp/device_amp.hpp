#pragma once
// hitch::amp::device_amp<D>: the mixed-precision element kernels of a device whose memory the host cannot read (a
// GPU), for amp::loss_scaler and amp::mixed_precision_optimizer. On host devices those classes run their own loops;
// on any other device they call this trait, which is specialised in the device's tree (hitch/cuda/amp/ for
// hitch::cuda::device). This floor knows no device.
//
// A specialisation offers
//   static bool unscale(D&, std::span<const layer> layers, float inv);
//       every layer's gradient g = g * inv in place; true when any result is inf or NaN (the loss scaler's check)
//   template <floating_element Low> class plan {       made once per mixed_precision_optimizer
//     plan();  plan(D&, std::span<const tensor_view<Low>> low_params, std::span<const tensor_view<Low>> low_grads,
//                   std::span<const tensor_view<float>> master_params, std::span<const tensor_view<float>>
//                   master_grads);
//     void widen_params();       master = float(low param)                     (once, at construction)
//     bool unscale(float inv);   master grad = float(low grad) * inv; true when any result is inf or NaN
//     void widen_grads();        master grad = float(low grad)
//     detail::nonfinite_report first_nonfinite();   the first inf/NaN in the master gradients (layer -1: none)
//     void narrow();             low param = Low(master), rounded to nearest even
//   };
// with the host loops' bits: float(x) and Low(x) are hitch::half / hitch::bfloat16's conversions (core/dtype.hpp),
// and the unscale is one float multiplication.

#include <span>

#include "hitch/amp/nonfinite.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::amp {

namespace detail {
template <class... T>
inline constexpr bool dependent_false = false;
}  // namespace detail

/// The mixed-precision kernels of device D (see the file comment). Specialised per device.
template <class D>
struct device_amp {
    static_assert(detail::dependent_false<D>,
                  "hitch::amp::device_amp: no mixed-precision kernels for this device. For hitch::cuda::device, "
                  "include <hitch/cuda/amp/mixed_precision.cuh> in the .cu file that uses the loss scaler or the "
                  "mixed-precision optimizer; for a device of your own, specialise hitch::amp::device_amp<Device> "
                  "(see hitch/amp/device_amp.hpp)");
};

namespace detail {
/// mixed_precision_optimizer's member for the device kernels: nothing on a host device.
struct no_amp_plan {};
template <class D, class Low, bool Host = host_device<D>>
struct amp_plan_of {
    using type = no_amp_plan;
};
template <class D, class Low>
struct amp_plan_of<D, Low, false> {
    using type = typename device_amp<D>::template plan<Low>;
};
template <class D, class Low>
using amp_plan_t = typename amp_plan_of<D, Low>::type;
}  // namespace detail

}  // namespace hitch::amp
