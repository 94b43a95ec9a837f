/work/main/build-device/spindle export --run /root/g3/report/run_ctx8192 --out /root/g3/report/idx_ctx8192
