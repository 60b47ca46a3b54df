// `moex chat` at a real terminal (tmux): Ctrl-C stops a reply and keeps the conversation,
// the arrow keys recall earlier lines (kept in a history file between sessions), /help and
// /save answer without going to the model. And the same commands from a pipe.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/external_tools.h"
#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;

std::string DemoModel() {
  return (testing::SourceDir() / "models" / "olmoe-demo").string();
}

// A tmux server of this test's own (-L), so nothing of the user's is touched.
class Tmux {
 public:
  explicit Tmux(const std::string& command)
      : socket_("moex-chat-test-" + std::to_string(getpid())) {
    const auto r = Run("new-session -d -x 160 -y 50 -s chat '" + command + "'");
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  ~Tmux() { Run("kill-server"); }
  testing::CommandResult Run(const std::string& args) const {
    return RunCommand("tmux -L " + socket_ + " " + args);
  }
  void Keys(const std::string& keys) const { Run("send-keys -t chat " + keys); }
  std::string Screen() const { return Run("capture-pane -p -t chat -S -200").out; }
  // Waits until the screen holds `text` `count` times; false after `seconds`.
  bool WaitFor(const std::string& text, int count = 1, double seconds = 60) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      const std::string screen = Screen();
      int seen = 0;
      for (size_t p = screen.find(text); p != std::string::npos; p = screen.find(text, p + 1))
        ++seen;
      if (seen >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Waits for `count` prompt lines ("> ", which capture-pane shows as ">" when empty).
  bool WaitForPrompt(int count = 1, double seconds = 60) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      const std::string screen = "\n" + Screen();
      int seen = 0;
      for (size_t p = screen.find("\n>"); p != std::string::npos; p = screen.find("\n>", p + 1))
        ++seen;
      if (seen >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string socket_;
};

TEST(ChatTerminal, CtrlCStopsTheReplyAndTheArrowKeysRecallLines) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("tmux"));
  testing::TempDir dir;
  // A long reply, so Ctrl-C comes while it streams: greedy, the small demo model repeats
  // itself rather than ending.
  Tmux tmux("env XDG_STATE_HOME=" + (dir / "state") + " " + testing::MoexBinary() +
            " chat --model " + DemoModel() +
            " --max-tokens 3000 --threads 1 2>&1; echo chat-exited-$?; sleep 30");
  ASSERT_TRUE(tmux.WaitForPrompt()) << tmux.Screen();
  tmux.Keys("'The history of science' Enter");
  ASSERT_TRUE(tmux.WaitFor("The history of science")) << tmux.Screen();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Some of the reply.
  tmux.Keys("C-c");
  ASSERT_TRUE(tmux.WaitFor("[stopped; ")) << tmux.Screen();
  ASSERT_TRUE(tmux.WaitForPrompt(2)) << tmux.Screen();  // Still running: a new prompt.
  tmux.Keys("/help Enter");
  ASSERT_TRUE(tmux.WaitFor("/save FILE")) << tmux.Screen();
  // Up twice: the first line again, from the history.
  tmux.Keys("Up Up");
  ASSERT_TRUE(tmux.WaitFor("> The history of science")) << tmux.Screen();
  tmux.Keys("C-u");  // Clear it; save what the conversation holds.
  tmux.Keys("'/save " + (dir / "c.json") + "' Enter");
  ASSERT_TRUE(tmux.WaitFor("saved 2 messages")) << tmux.Screen();
  tmux.Keys("/exit Enter");
  ASSERT_TRUE(tmux.WaitFor("chat-exited-0")) << tmux.Screen();

  const auto saved = nlohmann::json::parse(std::ifstream(dir / "c.json"));
  ASSERT_EQ(saved["messages"].size(), 2u);
  EXPECT_EQ(saved["messages"][0]["content"], "The history of science");
  EXPECT_EQ(saved["messages"][1]["role"], "assistant");
  EXPECT_FALSE(saved["messages"][1]["content"].get<std::string>().empty());  // The part kept.
  std::ifstream history(dir / "state/moex/chat_history");
  std::string all((std::istreambuf_iterator<char>(history)), {});
  // libedit's format writes a space as \040.
  EXPECT_NE(all.find("The\\040history\\040of\\040science"), std::string::npos) << all;
  EXPECT_NE(all.find("/help"), std::string::npos) << all;
}

TEST(ChatTerminal, CommandsFromAPipeNeverReachTheModel) {
  testing::TempDir dir;
  std::ofstream(dir / "taken.json") << "keep";
  const std::string chat = testing::Moex("chat --model " + DemoModel() + " --max-tokens 4");
  const auto r = RunCommand("(printf '/help\\n/frob\\nHi\\n/save " + (dir / "taken.json") +
                            "\\n/save " + (dir / "new.json") + "\\n' | " + chat + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("/reset"), std::string::npos) << r.err;  // /help's list.
  EXPECT_NE(r.err.find("unknown command /frob"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;  // Not replaced...
  std::string kept;
  std::getline(std::ifstream(dir / "taken.json"), kept);
  EXPECT_EQ(kept, "keep");  // ...kept as it was.
  const auto saved = nlohmann::json::parse(std::ifstream(dir / "new.json"));
  ASSERT_EQ(saved["messages"].size(), 2u);  // Only "Hi" and its reply: no command went in.
  EXPECT_EQ(saved["messages"][0]["content"], "Hi");
  // One stats line per reply.
  EXPECT_NE(r.err.find(" tokens, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s; prompt "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moex
