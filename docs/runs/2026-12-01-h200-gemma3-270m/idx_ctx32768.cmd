/work/main/build-device/spindle export --run /root/g3/report/run_ctx32768 --out /root/g3/report/idx_ctx32768
