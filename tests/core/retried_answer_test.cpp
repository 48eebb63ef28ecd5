// util/retried_answer.h: an answer a runtime did not give at init, asked again until it does,
// then read without a lock.  The threaded cases are what the TSan lane checks.
#include "util/retried_answer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/threads_started_together.h"

namespace {

using hmr::RetriedAnswer;
using hmr_test::kThreadsStartedTogether;
using hmr_test::on_threads;

TEST(RetriedAnswer, UnknownUntilKeptThenTheFirstAnswerStays) {
  RetriedAnswer<std::string> answer;
  EXPECT_EQ(answer.get(), nullptr);
  EXPECT_TRUE(answer.keep("first"));
  const std::string* kept = answer.get();
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(*kept, "first");
  EXPECT_FALSE(answer.keep("second"));
  EXPECT_EQ(answer.get(), kept);
  EXPECT_EQ(*answer.get(), "first");
}

TEST(RetriedAnswer, KnownFromTheStart) {
  const RetriedAnswer<int> answer = RetriedAnswer<int>::known(7);
  ASSERT_NE(answer.get(), nullptr);
  EXPECT_EQ(*answer.get(), 7);
}

// Owners are built, moved into place and only then shared: a move keeps what is known and
// what is not.
TEST(RetriedAnswer, AMoveKeepsTheState) {
  std::vector<RetriedAnswer<std::string>> answers;
  answers.push_back(RetriedAnswer<std::string>::known("kept"));
  answers.emplace_back();
  for (int i = 0; i < 16; ++i) answers.emplace_back();  // reallocates: every element moves
  ASSERT_NE(answers[0].get(), nullptr);
  EXPECT_EQ(*answers[0].get(), "kept");
  EXPECT_EQ(answers[1].get(), nullptr);
  EXPECT_TRUE(answers[1].keep("later"));
  RetriedAnswer<std::string> assigned;
  assigned = std::move(answers[1]);
  ASSERT_NE(assigned.get(), nullptr);
  EXPECT_EQ(*assigned.get(), "later");
}

// Threads that find no answer each ask and keep theirs: exactly one keep wins, and every
// reader, during and after, sees that one answer whole.
TEST(RetriedAnswer, ThreadsKeepingTogetherAgreeOnOneAnswer) {
  for (int round = 0; round < 200; ++round) {
    RetriedAnswer<std::string> answer;
    std::vector<int> won(kThreadsStartedTogether, 0);
    const std::vector<std::string> failures = on_threads([&](int i) -> std::string {
      const std::string mine = "answer of thread " + std::to_string(i);
      if (answer.get() == nullptr) won[static_cast<size_t>(i)] = answer.keep(mine) ? 1 : 0;
      const std::string* seen = answer.get();
      if (seen == nullptr) {
        // Another thread is between its claim and its store: nothing is known yet, which
        // is allowed; the caller uses its own answer.
        return {};
      }
      if (seen->rfind("answer of thread ", 0) != 0) return "torn answer: " + *seen;
      return {};
    });
    EXPECT_EQ(failures, std::vector<std::string>(kThreadsStartedTogether));
    int winners = 0;
    for (int w : won) winners += w;
    EXPECT_EQ(winners, 1);
    ASSERT_NE(answer.get(), nullptr);
    for (size_t i = 0; i < won.size(); ++i) {
      if (won[i] == 1) {
        EXPECT_EQ(*answer.get(), "answer of thread " + std::to_string(i));
      }
    }
  }
}

}  // namespace
