# The parsers of untrusted text that the fuzz targets link (tests/fuzz/CMakeLists.txt), absolute
# paths. Included by the top-level CMakeLists.txt too: with TANDEM_FUZZ and TANDEM_SANITIZE on,
# tandem_core takes these objects from tandem_fuzz_code instead of compiling them a second time.
file(GLOB TANDEM_FUZZ_CODE CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/server/jinja/*.cpp ${CMAKE_SOURCE_DIR}/server/tool_calls/*.cpp
  ${CMAKE_SOURCE_DIR}/engine/tokenizer/*.cpp)
list(APPEND TANDEM_FUZZ_CODE
  ${CMAKE_SOURCE_DIR}/kernels/common.cpp
  ${CMAKE_SOURCE_DIR}/kernels/json_depth.cpp
  ${CMAKE_SOURCE_DIR}/kernels/tensor.cpp
  ${CMAKE_SOURCE_DIR}/models/config.cpp
  ${CMAKE_SOURCE_DIR}/models/safetensors.cpp
  ${CMAKE_SOURCE_DIR}/server/chat_template.cpp
  ${CMAKE_SOURCE_DIR}/server/openai_codec.cpp
  ${CMAKE_SOURCE_DIR}/server/openai_constraints.cpp
  ${CMAKE_SOURCE_DIR}/server/openai_params.cpp
  ${CMAKE_SOURCE_DIR}/server/openai_plan.cpp
  ${CMAKE_SOURCE_DIR}/server/openai_encoder.cpp)
# The grammar compiler and matcher (fuzz_json_schema).
file(GLOB TANDEM_FUZZ_GRAMMAR CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/grammar/*.cpp)
list(APPEND TANDEM_FUZZ_CODE ${TANDEM_FUZZ_GRAMMAR})
