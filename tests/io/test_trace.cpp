// Trace files: round trip through numpy (np.load sees the interface.md schema), numpy-written traces
// load, and a table of mismatched / out-of-range inputs that must throw naming file, array, index.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <cmath>
#include <functional>

#include "audit/routing_stats.hpp"
#include "core/error.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"
#include "test_util.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

std::string tmp_dir(const std::string& name) { return arcal::testing::fresh_dir(name); }

int python(const std::string& code, std::string* out) {
  // One file per process and call: ctest -j runs test processes side by side.
  static int calls = 0;
  const std::string script = fs::path(ARCAL_BINARY_DIR) / "test_tmp" /
                             ("snippet_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".py");
  {
    FILE* f = std::fopen(script.c_str(), "w");
    std::fputs(code.c_str(), f);
    std::fclose(f);
  }
  FILE* pipe = ::popen((std::string(ARCAL_TEST_PYTHON) + " " + script + " 2>&1").c_str(), "r");
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) text += buf;
  *out = text;
  return ::pclose(pipe);
}

// N = 4, K = 3, P = 2 points with S_p = {1, 3}, S = 3.
Trace small_trace() {
  Trace t;
  t.n = 4;
  t.classes = 3;
  t.logits = {2, 0, 0, 0, 1, 0, 0, 0, 3, 1, 1, 1};
  t.labels = {0, 1, 2, 1};
  t.points = 2;
  t.sources = 3;
  t.routing_sources = {1, 3};
  for (int i = 0; i < 4; ++i) {
    const float r[6] = {1, 0, 0, 0.5f, 0.25f, 0.25f};
    t.routing.insert(t.routing.end(), r, r + 6);
  }
  t.features = {0.1, 0.2, 0.3, 0.4};
  t.num_features = 1;
  t.feature_names = {"gate_entropy"};
  t.meta_json = "{\"model\": \"ar-vit-tiny\"}";
  return t;
}

}  // namespace

TEST(Trace, RoundTripThroughNumpy) {
  const std::string d = tmp_dir("trace_rt");
  const std::string path = d + "/run1.npz";
  save_trace(small_trace(), path);
  std::string out;
  ASSERT_EQ(python("import numpy as np, json\n"
                   "z = np.load('" +
                       path +
                       "')\n"
                       "assert z['logits'].shape == (4, 3) and z['logits'].dtype == np.float64\n"
                       "assert z['labels'].dtype == np.int64 and list(z['labels']) == [0, 1, 2, 1]\n"
                       "assert z['routing'].dtype == np.float32 and z['routing'].shape == (4, 2, 3)\n"
                       "assert z['routing_sources'].dtype == np.int32 and list(z['routing_sources']) == [1, 3]\n"
                       "assert list(z['feature_names']) == ['gate_entropy']\n"
                       "assert json.loads(str(z['meta']))['model'] == 'ar-vit-tiny'\n"
                       "print('OK')\n",
                   &out),
            0)
      << out;
  const Trace t = load_trace(path);
  EXPECT_EQ(t.n, 4u);
  EXPECT_EQ(t.logits, small_trace().logits);
  EXPECT_EQ(t.routing, small_trace().routing);
  EXPECT_EQ(t.feature_names, small_trace().feature_names);
  EXPECT_EQ(t.meta_json, small_trace().meta_json);
  const auto p = trace_probabilities(t);
  EXPECT_NEAR(p[0], std::exp(2.0) / (std::exp(2.0) + 2.0), 1e-15);
}

TEST(Trace, RoutingKindRoundTripsAndDefaultsToDepth) {
  const std::string d = tmp_dir("trace_kind");
  EXPECT_EQ(small_trace().routing_kind, "depth");
  save_trace(small_trace(), d + "/depth.npz");
  std::string out;
  ASSERT_EQ(
      python("import numpy as np\nassert 'routing_kind' not in np.load('" + d + "/depth.npz')\nprint('OK')\n", &out), 0)
      << out;
  EXPECT_EQ(load_trace(d + "/depth.npz").routing_kind, "depth");  // absent: depth (every earlier trace)
  Trace moe = small_trace();
  moe.routing_kind = "unordered";
  save_trace(moe, d + "/moe.npz");
  ASSERT_EQ(python("import numpy as np\nassert str(np.load('" + d +
                       "/moe.npz')['routing_kind']) == 'unordered'\nprint('OK')\n",
                   &out),
            0)
      << out;
  EXPECT_EQ(load_trace(d + "/moe.npz").routing_kind, "unordered");
}

TEST(Trace, LoadsNumpyWrittenTraceWithInt32LabelsAndProbs) {
  const std::string d = tmp_dir("trace_np");
  const std::string path = d + "/np.npz";
  std::string out;
  ASSERT_EQ(python("import numpy as np\n"
                   "np.savez_compressed('" +
                       path +
                       "', probs=np.array([[0.2, 0.8], [0.6, 0.4]], dtype=np.float32),\n"
                       "  labels=np.array([1, 0], dtype=np.int32), meta=np.array('{}'),\n"
                       "  features=np.array([[1.0], [2.0]]), feature_names=np.array(['x']))\n",
                   &out),
            0)
      << out;
  const Trace t = load_trace(path);
  EXPECT_EQ(t.classes, 2u);
  EXPECT_TRUE(t.logits.empty());
  EXPECT_FLOAT_EQ(static_cast<float>(t.probs[1]), 0.8f);
  EXPECT_EQ(t.labels, (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(statistic_column(t, "x"), (std::vector<double>{1.0, 2.0}));
  EXPECT_NE(arcal::testing::input_error_message([&] { statistic_column(t, "re"); }).find("available: x"),
            std::string::npos);
}

TEST(Trace, InvalidTracesThrowNamingArrayAndIndex) {
  const std::string d = tmp_dir("trace_bad");
  struct Case {
    const char* what;
    std::function<void(Trace&)> mutate;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"label out of range", [](Trace& t) { t.labels[2] = 12; }, "labels[2] is 12, but must be in [0, 2]"},
      {"negative label", [](Trace& t) { t.labels[0] = -1; }, "labels[0] is -1"},
      {"nan logit", [](Trace& t) { t.logits[4] = std::nan(""); }, "logits[1, 1] is nan, but must be finite"},
      {"inf logit", [](Trace& t) { t.logits[0] = INFINITY; }, "logits[0, 0] is inf"},
      {"routing row sum", [](Trace& t) { t.routing[3] = 0.6f; }, "routing[0, 1, :3] sums to"},
      {"nonzero past sources", [](Trace& t) { t.routing[1] = 0.1f; }, "routing[0, 0, 1] is 0.100000001, but must be 0"},
      {"sources out of range", [](Trace& t) { t.routing_sources[1] = 4; },
       "routing_sources[1] is 4, but must be in [1, 3]"},
      {"labels N mismatch", [](Trace& t) { t.labels.pop_back(); }, "labels has 3"},
      {"features N mismatch", [](Trace& t) { t.features.pop_back(); }, "features has 3 values"},
      {"names mismatch", [](Trace& t) { t.feature_names.push_back("y"); }, "feature_names has 2"},
      {"entropy shape", [](Trace& t) { t.routing_entropy = {0.f}; }, "routing_entropy has 1 values"},
      {"routing kind", [](Trace& t) { t.routing_kind = "experts"; }, "routing_kind is 'experts', but must be 'depth'"},
      {"depth of unordered routing",
       [](Trace& t) {
         t.routing_kind = "unordered";
         t.routing_depth_var.assign(8, 0.f);
       },
       "routing_kind is 'unordered' (experts have no depth)"},
      {"probs sum",
       [](Trace& t) {
         t.probs = {0.5, 0.6, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0};
         t.logits.clear();
       },
       "probs row 0 sums to 1.1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Trace t = small_trace();
    c.mutate(t);
    t.path = "run1.npz";
    const std::string msg = arcal::testing::input_error_message([&] { validate_trace(t); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("run1.npz"), std::string::npos) << msg;
  }
}

TEST(Trace, LoadRejectsFilesNamingArrays) {
  const std::string d = tmp_dir("trace_files");
  struct Case {
    const char* what;
    std::string code;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"label range", "np.savez(P, logits=np.zeros((20, 10)), labels=np.arange(20) % 13)",
       "labels[10] is 10, but must be in [0, 9]"},
      {"float labels", "np.savez(P, logits=np.zeros((2, 2)), labels=np.zeros(2))", "labels has dtype <f8"},
      {"no labels", "np.savez(P, logits=np.zeros((2, 2)))", "no 'labels'"},
      {"both", "np.savez(P, logits=np.zeros((2, 2)), probs=np.full((2, 2), .5), labels=np.zeros(2, int))",
       "both 'logits' and 'probs'"},
      {"N mismatch", "np.savez(P, logits=np.zeros((3, 2)), labels=np.zeros(2, int))", "labels has 2 entries"},
      {"logits 1-d", "np.savez(P, logits=np.zeros(3), labels=np.zeros(3, int))", "logits has shape [3]"},
      {"routing no sources",
       "np.savez(P, logits=np.zeros((2, 2)), labels=np.zeros(2, int), routing=np.ones((2, 1, 1), np.float32))",
       "no 'routing_sources'"},
      {"routing N",
       "np.savez(P, logits=np.zeros((2, 2)), labels=np.zeros(2, int), routing=np.ones((3, 1, 1), np.float32), "
       "routing_sources=np.ones(1, np.int32))",
       "routing has 3 rows"},
      {"nan probs", "p=np.full((2, 2), .5); p[1, 0]=np.nan\nnp.savez(P, probs=p, labels=np.zeros(2, int))",
       "probs[1, 0] is nan"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = d + "/case.npz";
    std::string out;
    ASSERT_EQ(python("import numpy as np\nP = '" + path + "'\n" + c.code + "\n", &out), 0) << out;
    const std::string msg = arcal::testing::input_error_message([&] { load_trace(path); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("load_trace: " + path), std::string::npos) << msg;
  }
}

TEST(Trace, ClusterIdsRoundTripAndBadOnesAreRefusedByName) {
  const std::string d = tmp_dir("trace_cluster");
  Trace t = small_trace();
  t.cluster = {0, 0, 5, 5};
  save_trace(t, d + "/tokens.npz");
  std::string out;
  ASSERT_EQ(
      python(
          "import numpy as np\nz = np.load('" + d +
              "/tokens.npz')\n"
              "assert z['cluster'].dtype == np.int64 and list(z['cluster']) == [0, 0, 5, 5]\n"
              "np.savez('" +
              d +
              "/i32.npz', **{k: z[k] for k in z.files if k != 'cluster'}, cluster=np.array([1, 2, 3, 4], np.int32))\n"
              "np.savez('" +
              d +
              "/short.npz', **{k: z[k] for k in z.files if k != 'cluster'}, cluster=np.array([1, 2], np.int64))\n"
              "np.savez('" +
              d +
              "/float.npz', **{k: z[k] for k in z.files if k != 'cluster'}, cluster=np.zeros(4))\n"
              "print('OK')\n",
          &out),
      0)
      << out;
  EXPECT_EQ(load_trace(d + "/tokens.npz").cluster, t.cluster);
  EXPECT_EQ(load_trace(d + "/i32.npz").cluster, (std::vector<std::int64_t>{1, 2, 3, 4}));
  save_trace(small_trace(), d + "/plain.npz");
  EXPECT_TRUE(load_trace(d + "/plain.npz").cluster.empty());  // independent examples: no array
  auto message = [&](const std::string& path) {
    try {
      load_trace(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(d + "/short.npz").find("cluster has 2 entries"), std::string::npos) << message(d + "/short.npz");
  EXPECT_NE(message(d + "/float.npz").find("cluster has dtype"), std::string::npos) << message(d + "/float.npz");
  Trace bad = t;
  bad.cluster[2] = -1;
  try {
    save_trace(bad, d + "/bad.npz");
    FAIL() << "a negative cluster id was written";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster[2] is -1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(d + "/bad.npz"));
}
