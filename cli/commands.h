// commands.h: one function per subcommand. Each returns the process exit code:
// 0 success, 1 bad input or runtime failure, 2 bad usage.
#pragma once

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_teacher(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_scores(int argc, char **argv);
int cmd_bench(int argc, char **argv);
