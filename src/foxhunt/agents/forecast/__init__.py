"""The supervised forecast learner (``train.agent = "forecast"``): a network from the fold's normalised
features to the next h bars' return in units of the fold's h-bar volatility, trained by regression
(Huber / MSE) or quantile loss on every training bar, and traded through the env's costs at
execution (a no-trade band). config ([forecast]), target (causal targets), net (the forecast MLP),
execution (the cost-aware rule and its packing as a DuelingQNet), learner (the captured step),
trainer (the runner's interface), evaluate (out-of-sample IC and hit rate), checks."""
