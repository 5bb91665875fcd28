"""What a measurement ran under, side by side: the CPU's effective clock, governor and load
(`cpu`), a GPU's clocks, temperature, power, clock-event reasons and other processes through NVML
(`nvml`), and what other processes took from each sample (`disturbance`). Read only: rooflab
never changes clocks, governors or power limits."""
