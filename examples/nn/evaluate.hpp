#pragma once
// Loss and accuracy of a model over a whole data set, in evaluation mode (batch norm uses its running statistics).

#include "data/dataset.hpp"
#include "nn/loss.hpp"
#include "nn/model.hpp"

namespace hitch_examples::nn {

struct evaluation {
    double loss = 0;      ///< mean softmax cross-entropy
    double accuracy = 0;  ///< fraction of samples whose largest logit is their label
};

/// Walks `d` in order in batches of the model's max_batch. Allocates its batch buffers once per call.
template <class T>
evaluation evaluate(model<T>& m, const data::dataset& d, const data::normalization& norm) {
    data::batch_loader<T> loader(d, norm, m.max_batch());
    softmax_cross_entropy<T> loss(m.max_batch(), m.output_shape().size());
    double total_loss = 0;
    std::size_t correct = 0;
    for (std::size_t first = 0; first < d.size(); first += m.max_batch()) {
        loader.load_range(first, std::min(m.max_batch(), d.size() - first));
        const auto logits = m.forward(loader.images(), loader.size(), mode::eval);
        total_loss += static_cast<double>(loss.forward(logits, loader.labels())) * static_cast<double>(loader.size());
        correct += loss.correct();
    }
    const auto n = static_cast<double>(d.size());
    return {total_loss / n, static_cast<double>(correct) / n};
}

}  // namespace hitch_examples::nn
